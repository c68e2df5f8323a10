//! Generates the gRPC code of `proto/accounts.proto` with protox, a
//! protobuf compiler in pure Rust: no `protoc` needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/accounts.proto");
    let descriptors = protox::compile(["proto/accounts.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    Ok(())
}
