//! `embed_migrations!` reads `migrations/` at compile time, but cargo only learns of the files
//! it included: a migration directory added later left the binary without it (the node then
//! refuses a database migrated by a fresher build). Rebuild whenever the directory changes.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
