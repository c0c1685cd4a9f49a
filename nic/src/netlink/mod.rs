//! Netlink codecs and transport.
pub mod dcb;
pub mod events;
pub mod link;
pub mod nldev;
pub mod transport;
pub mod vf;
