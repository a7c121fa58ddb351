//! `keel cluster info`: brokers, controller and cluster id, from DescribeCluster when
//! the broker serves it, else from Metadata.

use clap::{Args, Subcommand};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::DescribeClusterRequest;
use serde_json::{json, Value};

use super::client::{check, CliResult, Client};
use super::output::{print_json, Format, Table};
use super::ClientArgs;

#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Cluster id, controller and brokers.
    Info,
}

pub fn run(args: ClusterArgs) -> CliResult<()> {
    let format = args.client.format;
    let mut client = Client::connect(&args.client.brokers())?;
    match args.command {
        ClusterCommand::Info => info(&mut client, format),
    }
}

fn info(client: &mut Client, format: Format) -> CliResult<()> {
    let mut brokers = Table::new(&["ID", "HOST", "PORT", "RACK", "FENCED"]);
    let (cluster_id, controller) = if client.any().supports(ApiKey::DescribeCluster) {
        let response = client.any().send(&DescribeClusterRequest::default())?;
        check(response.error_code, response.error_message.as_ref(), "describe cluster")?;
        let mut list: Vec<_> = response.brokers.iter().collect();
        list.sort_by_key(|b| b.broker_id.0);
        for b in list {
            let rack = b.rack.as_ref().map(|r| json!(r.as_str())).unwrap_or(Value::Null);
            brokers.row(vec![json!(b.broker_id.0), json!(b.host.as_str()), json!(b.port), rack, json!(b.is_fenced)]);
        }
        (Some(response.cluster_id.to_string()), response.controller_id.0)
    } else {
        let response = client.metadata(Some(&[]))?;
        let mut list: Vec<_> = response.brokers.iter().collect();
        list.sort_by_key(|b| b.node_id.0);
        for b in list {
            let rack = b.rack.as_ref().map(|r| json!(r.as_str())).unwrap_or(Value::Null);
            brokers.row(vec![json!(b.node_id.0), json!(b.host.as_str()), json!(b.port), rack, Value::Null]);
        }
        (response.cluster_id.as_ref().map(|c| c.to_string()), response.controller_id.0)
    };
    match format {
        Format::Json => print_json(&json!({
            "cluster_id": cluster_id,
            "controller": controller,
            "brokers": brokers.to_json(),
        })),
        Format::Table => {
            println!("CLUSTER     {}", cluster_id.as_deref().unwrap_or("-"));
            println!("CONTROLLER  {controller}\n");
            print!("{}", brokers.render());
        }
    }
    Ok(())
}
