//! Compile-time behaviour of `#[distributed_lock]`: what compiles
//! (`tests/ui/pass`) and the error for every misuse (`tests/ui/fail`, each
//! with its expected `.stderr`). Regenerate the expectations with
//! `TRYBUILD=overwrite cargo test -p lock-tests --test macro_ui`.

#[test]
fn distributed_lock_ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("ui/pass/*.rs");
    cases.compile_fail("ui/fail/*.rs");
}
