//! The admin API's HTTP server: `tiny_http` on a thread of its own (`keel-admin`),
//! off the reactors, so a slow or hostile admin client never holds a shard.
//!
//! Why tiny_http: a small, synchronous, well-kept server (no async runtime to carry
//! beside glommio). It parses each connection on a pooled thread of its own and hands
//! complete request heads to this thread, so a client that sends half a request ties
//! up only its own connection. Bodies of at most 1 KiB arrive already read; larger
//! ones are refused unread.
//!
//! This thread never touches shard state: what needs the shards goes as a [`Call`]
//! over a bounded channel to shard 0, which answers from a task (see [`crate::admin::api`]).
//! While calls are out, the thread keeps accepting requests and polls for answers, so
//! a slow call (a leadership move waits up to 10 s) delays no other request.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;
use serde_json::{json, Value};
use tiny_http::{Header, Method, Request, Response, Server};

use super::api::{Answer, Call, Query, Refusal};
use crate::config::BrokerConfig;

/// Calls waiting for shard 0 at once; past it, requests get 503.
const CALLS_IN_FLIGHT_MAX: usize = 64;
/// How long a call may take before the request is answered 504.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often answers are looked for while calls are out.
const POLL_INTERVAL: Duration = Duration::from_millis(2);
/// How often the exporter's upkeep runs (it also runs at each render).
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);
/// Largest request body read (`PUT /v1/config/log_level`).
const BODY_BYTES_MAX: usize = 1024;
/// Gauges not set for this long (a deleted group's lag) leave `/metrics`.
const GAUGE_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// What shard 0 needs to answer the admin thread.
#[derive(Clone)]
pub struct AdminLink {
    pub calls: flume::Receiver<Call>,
    /// Set by shard 0 once every shard is ready and it answers calls.
    pub ready: Arc<AtomicBool>,
}

static RECORDER: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process's metrics recorder (once) and returns its handle.
pub fn recorder() -> PrometheusHandle {
    RECORDER
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full(crate::telemetry::names::FLUSH_PASS_SECONDS.into()),
                    &keel_storage::flush::PASS_TIME_BOUNDS,
                )
                .expect("static buckets are valid")
                .idle_timeout(MetricKindMask::GAUGE, Some(GAUGE_IDLE_TIMEOUT))
                .build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed: /metrics will be empty");
            }
            crate::telemetry::names::describe();
            super::publish::describe();
            handle
        })
        .clone()
}

/// Binds `config.admin_addr` and starts the admin thread.
pub fn start(config: &BrokerConfig) -> Result<AdminLink, String> {
    let metrics = recorder();
    let addr = config.admin_addr.clone();
    let server = Server::http(&addr).map_err(|e| format!("admin API cannot listen on {addr}: {e}"))?;
    let (calls_tx, calls_rx) = flume::bounded(CALLS_IN_FLIGHT_MAX);
    let ready = Arc::new(AtomicBool::new(false));
    let effective = match serde_json::to_value(config) {
        Ok(Value::Object(map)) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), crate::config::sources::redacted(k, v))).collect())
        }
        _ => Value::Null,
    };
    let admin = Admin {
        server,
        calls: calls_tx,
        ready: ready.clone(),
        token: config.admin_token.clone().filter(|t| !t.is_empty()),
        config: effective,
        metrics,
        pending: Vec::new(),
    };
    std::thread::Builder::new()
        .name("keel-admin".into())
        .spawn(move || admin.run())
        .map_err(|e| format!("cannot start the admin thread: {e}"))?;
    tracing::info!(%addr, "admin API listening");
    Ok(AdminLink { calls: calls_rx, ready })
}

struct Admin {
    server: Server,
    calls: flume::Sender<Call>,
    ready: Arc<AtomicBool>,
    token: Option<String>,
    /// The effective configuration, the token redacted.
    config: Value,
    metrics: PrometheusHandle,
    pending: Vec<Pending>,
}

/// A request waiting for shard 0's answer.
struct Pending {
    request: Request,
    answer: flume::Receiver<Answer>,
    then: Then,
    deadline: Instant,
}

/// What to send once the answer is in.
#[derive(Clone, Copy)]
enum Then {
    Json,
    Metrics { public: bool },
}

/// A response: status, content type and body.
struct Reply {
    status: u16,
    content_type: &'static str,
    body: String,
    allow: Option<&'static str>,
}

impl Reply {
    fn json(status: u16, value: &Value) -> Reply {
        Reply { status, content_type: "application/json", body: format!("{value}\n"), allow: None }
    }

    fn error(status: u16, message: impl std::fmt::Display) -> Reply {
        Reply::json(status, &json!({"error": message.to_string(), "status": status}))
    }

    fn not_allowed(allow: &'static str) -> Reply {
        Reply { allow: Some(allow), ..Reply::error(405, format!("method not allowed; allowed: {allow}")) }
    }
}

/// What a request asks for.
enum Route {
    Now(Reply),
    Ask(Query, Then),
}

impl Admin {
    fn run(mut self) {
        let mut last_upkeep = Instant::now();
        loop {
            let wait = if self.pending.is_empty() { UPKEEP_INTERVAL } else { POLL_INTERVAL };
            match self.server.recv_timeout(wait) {
                Ok(Some(request)) => self.accept(request),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "admin API: accepting a request failed");
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            self.finish_answered();
            if last_upkeep.elapsed() >= UPKEEP_INTERVAL {
                self.metrics.run_upkeep();
                last_upkeep = Instant::now();
            }
        }
    }

    fn accept(&mut self, mut request: Request) {
        match self.route(&mut request) {
            Route::Now(reply) => send(request, reply),
            Route::Ask(query, then) => {
                if !self.ready.load(Ordering::Acquire) {
                    return send(request, Reply::error(503, "the broker is starting"));
                }
                let (reply, answer) = flume::bounded(1);
                match self.calls.try_send(Call { query, reply }) {
                    Ok(()) => {
                        self.pending.push(Pending { request, answer, then, deadline: Instant::now() + CALL_TIMEOUT })
                    }
                    Err(flume::TrySendError::Full(_)) => send(request, Reply::error(503, "too many admin requests")),
                    Err(flume::TrySendError::Disconnected(_)) => send(request, Reply::error(503, "the broker stopped")),
                }
            }
        }
    }

    fn finish_answered(&mut self) {
        let now = Instant::now();
        let mut i = 0;
        while i < self.pending.len() {
            let answer = match self.pending[i].answer.try_recv() {
                Ok(answer) => answer,
                Err(flume::TryRecvError::Empty) if now < self.pending[i].deadline => {
                    i += 1;
                    continue;
                }
                Err(flume::TryRecvError::Empty) => Err(Refusal::new(504, "the shards did not answer in time")),
                Err(flume::TryRecvError::Disconnected) => Err(Refusal::new(503, "the broker stopped")),
            };
            let p = self.pending.swap_remove(i);
            let reply = match (answer, p.then) {
                (Err(refusal), _) => Reply::error(refusal.status, refusal.message),
                // A string is JSON text already laid out (`/v1/status`).
                (Ok(Value::String(text)), Then::Json) => {
                    Reply { status: 200, content_type: "application/json", body: text + "\n", allow: None }
                }
                (Ok(value), Then::Json) => Reply::json(200, &value),
                (Ok(_), Then::Metrics { public }) => {
                    let text = self.metrics.render();
                    let body = if public { super::publish::public_subset(&text) } else { text };
                    Reply { status: 200, content_type: "text/plain; version=0.0.4", body, allow: None }
                }
            };
            send(p.request, reply);
        }
    }

    fn route(&self, request: &mut Request) -> Route {
        let url = request.url().to_string();
        let (path, query) = url.split_once('?').unwrap_or((&url, ""));
        let method = request.method().clone();
        let get = method == Method::Get || method == Method::Head;
        // Liveness and readiness stay open: probes seldom carry credentials.
        let open = matches!(path, "/v1/health" | "/v1/status/ready");
        if !open && !self.authorized(request) {
            return Route::Now(Reply::error(401, "missing or wrong bearer token"));
        }
        let json = Then::Json;
        let ask = |q: Query| Route::Ask(q, json);
        let segments: Vec<String> = match path.strip_prefix('/') {
            Some(p) => p.split('/').map(percent_decode).collect(),
            None => return Route::Now(Reply::error(400, "the request target must be a path")),
        };
        let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
        let only_get = |route: Route| if get { route } else { Route::Now(Reply::not_allowed("GET")) };
        match segments.as_slice() {
            ["v1", "health"] => only_get(Route::Now(Reply {
                status: 200,
                content_type: "text/plain",
                body: "ok\n".into(),
                allow: None,
            })),
            ["v1", "status", "ready"] => only_get(Route::Now(if self.ready.load(Ordering::Acquire) {
                Reply::json(200, &json!({"ready": true}))
            } else {
                Reply::json(503, &json!({"ready": false}))
            })),
            ["metrics"] => only_get(Route::Ask(Query::Metrics, Then::Metrics { public: false })),
            ["public_metrics"] => only_get(Route::Ask(Query::Metrics, Then::Metrics { public: true })),
            ["v1", "status"] => only_get(ask(Query::Status)),
            ["v1", "cluster"] => only_get(ask(Query::Cluster)),
            ["v1", "cluster", "health"] => only_get(ask(Query::ClusterHealth)),
            ["v1", "brokers"] => only_get(ask(Query::Brokers)),
            ["v1", "topics"] => only_get(ask(Query::Topics)),
            ["v1", "topics", topic] if !topic.is_empty() => only_get(ask(Query::Topic(topic.to_string()))),
            ["v1", "groups"] => only_get(ask(Query::Groups)),
            ["v1", "groups", group] if !group.is_empty() => only_get(ask(Query::Group(group.to_string()))),
            ["v1", "config"] => only_get(Route::Now(Reply::json(200, &self.config))),
            ["v1", "config", "log_level"] => match method {
                Method::Get => Route::Now(Reply::json(200, &json!({"log_level": super::log_level::current()}))),
                Method::Put => Route::Now(set_log_level(request)),
                _ => Route::Now(Reply::not_allowed("GET, PUT")),
            },
            ["v1", "partitions", topic, partition, "leader"] => {
                if method != Method::Post {
                    return Route::Now(Reply::not_allowed("POST"));
                }
                let Ok(partition) = partition.parse::<i32>() else {
                    return Route::Now(Reply::error(400, format!("{partition:?} is not a partition number")));
                };
                let to = query.split('&').find_map(|kv| kv.strip_prefix("to="));
                let to = match to.map(str::parse::<i32>) {
                    None => None,
                    Some(Ok(n)) => Some(n),
                    Some(Err(_)) => return Route::Now(Reply::error(400, "`to` is not a node id")),
                };
                ask(Query::MoveLeader { topic: topic.to_string(), partition, to })
            }
            _ => Route::Now(Reply::error(404, format!("no such endpoint: {path}"))),
        }
    }

    fn authorized(&self, request: &Request) -> bool {
        let Some(token) = &self.token else { return true };
        let given = request
            .headers()
            .iter()
            .find(|h| h.field.equiv("Authorization"))
            .and_then(|h| h.value.as_str().strip_prefix("Bearer "));
        // Compared in full whatever the first difference: no timing hint.
        given.is_some_and(|g| {
            g.len() == token.len() && g.bytes().zip(token.bytes()).fold(0, |d, (a, b)| d | (a ^ b)) == 0
        })
    }
}

/// `PUT /v1/config/log_level` with `{"level": "debug"}` (or the level as plain text).
fn set_log_level(request: &mut Request) -> Reply {
    match request.body_length() {
        None => return Reply::error(411, "a body with a Content-Length is required"),
        Some(n) if n > BODY_BYTES_MAX => return Reply::error(413, format!("body over {BODY_BYTES_MAX} bytes")),
        Some(_) => {}
    }
    let mut body = String::new();
    if request.as_reader().take(BODY_BYTES_MAX as u64).read_to_string(&mut body).is_err() {
        return Reply::error(400, "the body is not UTF-8 text");
    }
    let level = if body.trim_start().starts_with('{') {
        match serde_json::from_str::<Value>(&body) {
            Ok(v) => match v.get("level").and_then(Value::as_str) {
                Some(l) => l.to_string(),
                None => return Reply::error(400, "expected {\"level\": \"...\"}"),
            },
            Err(e) => return Reply::error(400, format!("bad JSON: {e}")),
        }
    } else {
        body.trim().to_string()
    };
    match super::log_level::set(&level) {
        Ok(()) => Reply::json(200, &json!({"log_level": level})),
        Err(e) => Reply::error(400, e),
    }
}

fn send(request: Request, reply: Reply) {
    let mut response = Response::from_string(reply.body).with_status_code(reply.status);
    let header = |name: &str, value: &str| Header::from_bytes(name.as_bytes(), value.as_bytes()).ok();
    response.add_header(header("Content-Type", reply.content_type).expect("a valid header"));
    if let Some(allow) = reply.allow.and_then(|a| header("Allow", a)) {
        response.add_header(allow);
    }
    if reply.status == 401 {
        response.add_header(header("WWW-Authenticate", "Bearer").expect("a valid header"));
    }
    // The client may have gone: nothing to tell it.
    let _ = request.respond(response);
}

/// Decodes `%XX` escapes of a path segment (topic and group names).
fn percent_decode(segment: &str) -> String {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn path_segments_are_percent_decoded() {
        assert_eq!(super::percent_decode("my%20group"), "my group");
        assert_eq!(super::percent_decode("a%2"), "a%2");
        assert_eq!(super::percent_decode("100%"), "100%");
        assert_eq!(super::percent_decode("%41"), "A");
    }
}
