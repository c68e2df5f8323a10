//! Several keys per request: [`MultiLockLayer`], the [`MultiLockService`]
//! it makes, the [`MultiLockFuture`] that takes every lock, the
//! [`MakeLockKeys`] key functions and the [`HeldLocks`] the handler sees.
//!
//! # Usage
//!
//! See the [crate docs](crate), "Several keys per request".

mod flavour;
mod future;
mod held;
mod keys;
mod layer;
mod service;

#[cfg(feature = "tonic")]
mod grpc;
#[cfg(feature = "http")]
mod http;

pub use flavour::{AttachHeldLocks, MultiFlavour};
pub use future::MultiLockFuture;
pub use held::HeldLocks;
pub use keys::{IntoLockKeys, MakeLockKeys};
pub use layer::MultiLockLayer;
pub use service::MultiLockService;
