//! One module per CNI command (spec 1.1.0: ADD, DEL, CHECK, STATUS, GC, VERSION).

pub mod add;
pub mod check;
pub mod del;
pub mod gc;
pub mod status;
pub mod version;
