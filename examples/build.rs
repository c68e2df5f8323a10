//! With the `grpc` feature, generates the gRPC code of
//! `proto/accounts.proto` with protox, a protobuf compiler in pure Rust: no
//! `protoc` needed. Without it (the flash-sale demo's build), does nothing.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    #[cfg(feature = "grpc")]
    {
        println!("cargo:rerun-if-changed=proto/accounts.proto");
        let descriptors = protox::compile(["proto/accounts.proto"], ["proto"])?;
        tonic_prost_build::configure().compile_fds(descriptors)?;
    }
    #[cfg(not(feature = "grpc"))]
    println!("cargo:rerun-if-changed=build.rs");
    Ok(())
}
