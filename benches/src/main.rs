//! `keel-bench`: see the crate documentation of `keel_benches`.

use clap::Parser;

fn main() {
    let cli = keel_benches::cli::Cli::parse();
    if let Err(error) = keel_benches::cli::run(cli) {
        eprintln!("keel-bench: {error}");
        std::process::exit(1);
    }
}
