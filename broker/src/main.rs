use clap::Parser;
use keel_broker::cli::client::finish;
use keel_broker::cli::{cluster, config, group, topic, tune, Cli, Command, ServeArgs};

/// Keeps hostile element counts in requests from aborting the process; see
/// `keel_protocol::alloc`.
#[global_allocator]
static ALLOCATOR: keel_protocol::alloc::GuardedAllocator = keel_protocol::alloc::GuardedAllocator;

fn main() {
    keel_broker::admin::log_level::init();
    let cli = Cli::parse();
    if !matches!(cli.command, Some(Command::Serve(_)) | None) {
        // A client command piped into `head` ends quietly when the pipe closes, as
        // Unix tools do, instead of failing a write (Rust ignores SIGPIPE by default).
        // SAFETY: restores the default disposition of one signal before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    let args = match cli.command {
        Some(Command::Serve(args)) => args,
        Some(Command::Topic(args)) => {
            let format = args.client.format;
            std::process::exit(finish(topic::run(args), format))
        }
        Some(Command::Group(args)) => {
            let format = args.client.format;
            std::process::exit(finish(group::run(args), format))
        }
        Some(Command::Cluster(args)) => {
            let format = args.client.format;
            std::process::exit(finish(cluster::run(args), format))
        }
        Some(Command::Config(args)) => std::process::exit(config::run(args)),
        Some(Command::Tune(args)) => std::process::exit(tune::run(args)),
        None => ServeArgs::default(),
    };
    let result = args.into_config().and_then(keel_broker::server::run);
    if let Err(e) = result {
        eprintln!("keel: {e}");
        std::process::exit(1);
    }
}
