//! `keel config print`: the configuration `keel serve` would run with given the same
//! flags, file and environment, each setting with the layer it came from (see
//! `config_sources` for the precedence). Nothing is contacted: it reads what the
//! broker would read at start, so it answers before a broker runs.

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::output::{print_error, print_json, Format, Table};
use super::ServeArgs;
use crate::config::sources::{self as config_sources, env_name};

#[derive(Args, Debug)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub command: ConfigCommand,
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// The effective configuration and each value's source: flag > env (KEEL_*) > yaml > default.
    Print {
        #[command(flatten)]
        serve: ServeArgs,
        /// Output: an aligned table or JSON.
        #[arg(long = "format", value_enum, default_value = "table")]
        format: Format,
    },
}

/// Exit status: 0, or 2 when the configuration is invalid (as `keel serve` refuses it).
pub fn run(args: ConfigArgs) -> i32 {
    match args.command {
        ConfigCommand::Print { serve, format } => match serve.resolve(&config_sources::process_env()) {
            Ok(resolved) => {
                print(&resolved, format);
                0
            }
            Err(e) => {
                print_error(&e.to_string(), 2, format);
                2
            }
        },
    }
}

fn print(resolved: &config_sources::Resolved, format: Format) {
    let mut table = Table::new(&["SETTING", "VALUE", "SOURCE", "ENV"]);
    for (key, (value, layer)) in &resolved.settings {
        let value = match (format, config_sources::redacted(key, value)) {
            // A map (topic_defaults) prints as its JSON text in a table cell.
            (Format::Table, value @ Value::Object(_)) => json!(value.to_string()),
            (_, value) => value,
        };
        table.row(vec![json!(key), value, json!(layer.name()), json!(env_name(key))]);
    }
    match format {
        Format::Json => print_json(&table.to_json()),
        Format::Table => print!("{}", table.render()),
    }
}
