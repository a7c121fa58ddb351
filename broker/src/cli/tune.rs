//! `keel tune`: the host checks of `keel_tuning::host` as a table or JSON, applied with
//! `--apply`; `keel tune disk`: the disk probe of `keel_tuning::disk`, which writes the
//! `io-properties.yaml` that `keel serve --io-properties` reads.

use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::json;

use super::output::{print_error, print_json, Format, Table};
use keel_tuning::disk::{self, Pass, ProbeOptions};
use keel_tuning::host::{self, Host, Status};

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct TuneArgs {
    #[command(subcommand)]
    pub command: Option<TuneCommand>,
    /// The data directory whose disk is checked (scheduler, nomerges, write cache).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// The cores the shards run on, e.g. 2-3: IRQs are checked to be off them.
    #[arg(long)]
    pub cpuset: Option<String>,
    /// Write the recommended values (as root) where a /proc or /sys file can.
    #[arg(long)]
    pub apply: bool,
    /// Output: an aligned table or JSON.
    #[arg(long = "format", value_enum, default_value = "table")]
    pub format: Format,
}

#[derive(Subcommand, Debug)]
pub enum TuneCommand {
    /// Measure the data disk (O_DIRECT through io_uring, as the broker writes) and write io-properties.yaml.
    Disk {
        #[arg(long)]
        data_dir: PathBuf,
        /// Where to write the properties.
        #[arg(long, default_value = "io-properties.yaml")]
        output: PathBuf,
        /// Scratch file size, read and written whole by each sequential pass.
        #[arg(long, default_value = "256M")]
        size: String,
        /// Length of each random pass, in seconds.
        #[arg(long, default_value_t = 1.0)]
        random_seconds: f64,
        #[arg(long = "format", value_enum, default_value = "table")]
        format: Format,
    },
}

/// Exit status: 0; 1 when the probe fails or `--apply` could not write a value; 2 on bad flags.
pub fn run(args: TuneArgs) -> i32 {
    let (result, format) = match args.command {
        Some(TuneCommand::Disk { data_dir, output, size, random_seconds, format }) => {
            (disk(data_dir, output, &size, random_seconds, format), format)
        }
        None => (check(args.data_dir, args.cpuset.as_deref(), args.apply, args.format), args.format),
    };
    match result {
        Ok(code) => code,
        Err((code, message)) => {
            print_error(&message, code, format);
            code
        }
    }
}

type TuneResult = Result<i32, (i32, String)>;

fn check(data_dir: Option<PathBuf>, cpuset: Option<&str>, apply: bool, format: Format) -> TuneResult {
    let shard_cpus = match cpuset {
        Some(list) => keel_tuning::parse_cpuset(list).map_err(|e| (2, e))?,
        None => Vec::new(),
    };
    if let Some(dir) = &data_dir {
        if !dir.is_dir() {
            return Err((2, format!("--data-dir {}: not a directory", dir.display())));
        }
    }
    // SAFETY: geteuid only reads the process's credentials.
    if apply && unsafe { libc::geteuid() } != 0 {
        return Err((1, "--apply writes under /proc and /sys: run it as root".into()));
    }
    let host = Host { root: "/".into(), data_dir, shard_cpus };
    let mut findings = host.check();
    if apply {
        host::apply(&mut findings);
    }
    let failed_writes =
        findings.iter().filter(|f| f.applied.as_deref().is_some_and(|a| a.contains("cannot write"))).count();
    match format {
        Format::Json => print_json(&serde_json::to_value(&findings).unwrap_or_default()),
        Format::Table => {
            let mut table = Table::new(&["CHECK", "STATUS", "CURRENT", "RECOMMENDED", "WHY"]);
            for f in &findings {
                let status = match f.status {
                    Status::Ok => "ok",
                    Status::Change => "change",
                    Status::Advice => "advice",
                    Status::NotApplicable => "n/a",
                };
                let why = match &f.applied {
                    Some(applied) => format!("{} [applied: {applied}]", f.why),
                    None => f.why.clone(),
                };
                table.row(vec![json!(f.check), json!(status), json!(f.current), json!(f.recommended), json!(why)]);
            }
            table.print(Format::Table);
            let changes = findings.iter().filter(|f| f.status == Status::Change).count();
            if changes > 0 && !apply {
                println!("\n{changes} value(s) can be set with `keel tune --apply` (as root).");
            }
        }
    }
    Ok(if failed_writes > 0 { 1 } else { 0 })
}

fn disk(data_dir: PathBuf, output: PathBuf, size: &str, random_seconds: f64, format: Format) -> TuneResult {
    let file_bytes = keel_tuning::parse_size(size).map_err(|e| (2, format!("--size: {e}")))?;
    if file_bytes < disk::SEQUENTIAL_BLOCK_BYTES as u64 {
        return Err((2, format!("--size {size}: at least {} bytes", disk::SEQUENTIAL_BLOCK_BYTES)));
    }
    if !(random_seconds > 0.0 && random_seconds <= 600.0) {
        return Err((2, format!("--random-seconds {random_seconds}: between 0 and 600")));
    }
    if !data_dir.is_dir() {
        return Err((2, format!("--data-dir {}: not a directory", data_dir.display())));
    }
    let total = (2 * disk::SEQUENTIAL_DEPTHS.len() + 2 * disk::RANDOM_DEPTHS.len()) as u64;
    let bar = indicatif::ProgressBar::new(total).with_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} passes {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let on_pass: Rc<dyn Fn(&Pass)> = Rc::new({
        let bar = bar.clone();
        move |p: &Pass| {
            bar.set_message(format!("{} qd{}: {}", p.workload, p.queue_depth, rate(p)));
            bar.inc(1);
        }
    });
    let options = ProbeOptions {
        data_dir: data_dir.clone(),
        file_bytes,
        random_time: Duration::from_secs_f64(random_seconds),
        on_pass: Some(on_pass),
    };
    let (passes, props) =
        disk::probe(options).map_err(|e| (1, format!("disk probe in {}: {e}", data_dir.display())))?;
    bar.finish_and_clear();
    let yaml = serde_yaml::to_string(&props).map_err(|e| (1, e.to_string()))?;
    std::fs::write(&output, yaml).map_err(|e| (1, format!("writing {}: {e}", output.display())))?;
    match format {
        Format::Json => print_json(&json!({ "passes": passes, "io_properties": props, "written": output })),
        Format::Table => {
            let mut table = Table::new(&["WORKLOAD", "BLOCK", "QUEUE DEPTH", "MB/S", "IOPS"]);
            for p in &passes {
                table.row(vec![
                    json!(p.workload),
                    json!(format!("{} KiB", p.block_bytes >> 10)),
                    json!(p.queue_depth),
                    json!(format!("{:.1}", p.bytes_per_second as f64 / 1e6)),
                    json!(p.iops),
                ]);
            }
            table.print(Format::Table);
            println!("wrote {}", output.display());
        }
    }
    Ok(0)
}

fn rate(p: &Pass) -> String {
    if p.block_bytes >= 64 << 10 {
        format!("{:.0} MB/s", p.bytes_per_second as f64 / 1e6)
    } else {
        format!("{} IOPS", p.iops)
    }
}
