//! The accept loop of one shard, with the per-shard share of the connection limit.

use std::rc::Rc;

use glommio::net::TcpListener;

use super::conn;
use crate::shard::Shard;

pub async fn serve(shard: Rc<Shard>) -> Result<(), String> {
    let addr = shard.config.kafka_addr.clone();
    let listener = TcpListener::bind(&addr).map_err(|e| format!("shard {} cannot listen on {addr}: {e}", shard.id))?;
    let connections_max = (shard.config.connections_max / shard.count).max(1);
    tracing::info!(shard = shard.id, %addr, "accepting Kafka connections");
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        if shard.connections.get() >= connections_max {
            tracing::warn!(shard = shard.id, connections_max, "connection limit reached; closing new connection");
            drop(stream);
            continue;
        }
        let shard = shard.clone();
        glommio::spawn_local(async move {
            shard.connections.set(shard.connections.get() + 1);
            conn::serve(&shard, stream).await;
            shard.connections.set(shard.connections.get() - 1);
        })
        .detach();
    }
}
