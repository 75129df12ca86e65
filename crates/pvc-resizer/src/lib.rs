//! pvc-resizer's library: the pure stages of a reconcile and what they read.
//!
//! | module | what |
//! |---|---|
//! | [`policy`] | `autoResize` as numbers, and one growth step |
//! | [`claim`] | the claim's size and conditions; the claim applied to grow it |
//! | [`stats`] | the kubelet's `/stats/summary`, per claim |
//! | [`decide`] | the decision: grow to a size, or hold with a typed reason |
//! | [`live`] | what a reconcile read |
//! | [`report`] | `status.storage`, StorageReady and the Events |
//! | [`events`] | the Event reasons |

pub mod claim;
pub mod decide;
pub mod events;
pub mod live;
pub mod policy;
pub mod report;
pub mod stats;
