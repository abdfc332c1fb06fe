//! Wire types: the params and result of every operation, with their JSON Schemas, a file per
//! concern. Row records (`Session`, `Message`, `Event`, …) come from the store. Editor clients
//! mirror these.

mod agents;
mod approvals;
mod collab;
mod forge;
mod hooks;
mod inbox;
mod landing;
mod parties;
mod plugins;
mod schedules;
mod sessions;
mod tasks;

pub use agents::*;
pub use approvals::*;
pub use collab::*;
pub use forge::*;
pub use hooks::*;
pub use inbox::*;
pub use landing::*;
pub use parties::*;
pub use plugins::*;
pub use schedules::*;
pub use sessions::*;
pub use tasks::*;
