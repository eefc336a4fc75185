//! Rebuilds the coordinator when a migration is added or changed: refinery's
//! `embed_migrations!` reads `migrations/` at compile time, which cargo does
//! not track by itself (a new SQL file would otherwise be left out of the
//! binary until some Rust source changed).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
