//! Compile-time behaviour of `#[distributed_lock]`: what compiles
//! (`tests/ui/pass`) and the error for every misuse (`tests/ui/fail`, each
//! with its expected `.stderr`). The cases use the macro through lock-core's
//! `macros` feature, as users do. Regenerate the expectations with
//! `TRYBUILD=overwrite cargo test -p lock-macros --test ui` and review the diff.

#[test]
fn distributed_lock_ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
