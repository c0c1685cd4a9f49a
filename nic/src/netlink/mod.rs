//! Netlink codecs and transport.
pub mod events;
pub mod nldev;
pub mod transport;
pub mod vf;
pub mod dcb;
