//! lock-tower: the layer at the tower level and behind real axum and tonic
//! servers on loopback, and the request's lock as the inner service,
//! handler or method sees it; the multi-lock layer (several keys per
//! request) and the permit layer (a per-key concurrency limit) likewise.
//! The layer's log events are checked in the `logs` binary.

mod support;

/// The suites, one module per file in `middleware/`.
mod middleware {
    mod lock_tower;
    mod lock_tower_grpc;
    mod lock_tower_http;
    mod lock_tower_rw;
    mod lock_tower_rw_grpc;
    mod multi_lock_tower;
    mod multi_lock_tower_grpc;
    mod multi_lock_tower_http;
    mod permit_tower;
    mod permit_tower_grpc;
    mod permit_tower_http;
    mod tower_extension;
    mod tower_extension_grpc;
    mod tower_extension_http;
}
