//! Netlink codecs and transport.
