//! `--session-store redis://`: a real `redis-server` on loopback and real `--http` replicas,
//! spoken to by rmcp's HTTP client. A session's calls go round-robin over the replicas while one
//! is killed and restarted; concurrent calls on one session reach two replicas; the store is
//! stopped and restarted; a stored state is tampered with. Both engines.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::client::{Client, handle_in, run_python, run_python_with, structured, text};
use crate::common::http::{HttpServer, modern};
use crate::common::redis::Redis;

/// A replica of the server on a free loopback port, keeping its sessions in `redis`.
fn replica(redis: &Redis, extra: &[&str]) -> HttpServer {
    let url = redis.url();
    let mut args = vec![
        "--http",
        "127.0.0.1:0",
        "--session-store",
        &url,
        "--timeout",
        "2",
    ];
    args.extend(extra);
    HttpServer::start(&args)
}

/// `code` in `session` (or fresh) on `client`: the reply, which must not be a tool error.
async fn call(client: &Client, code: &str, session: Option<&str>) -> Value {
    let reply = client
        .call_tool(run_python(code, session))
        .await
        .expect("the replica answers");
    assert_eq!(reply.is_error, Some(false), "{code:?}: {}", text(&reply));
    structured(&reply).clone()
}

/// `code` in `session`, which must be refused: the refusal's text.
async fn refusal(client: &Client, code: &str, session: &str) -> String {
    let reply = client
        .call_tool(run_python(code, Some(session)))
        .await
        .unwrap();
    assert_eq!(reply.is_error, Some(true), "{code:?} ran: {reply:?}");
    text(&reply)
}

/// Starts a session on `client` with `code` and returns its handle.
async fn start(client: &Client, code: &str) -> String {
    let reply = client
        .call_tool(run_python(code, Some("new")))
        .await
        .unwrap();
    assert_eq!(reply.is_error, Some(false), "{}", text(&reply));
    assert!(
        structured(&reply)["session"]["stored_bytes"]
            .as_u64()
            .unwrap()
            > 0
    );
    handle_in(&reply).expect("a handle")
}

/// The one session hash in `redis`'s keys (and its lease, if any), which must not show `handle`.
fn stored_key(redis: &Redis, handle: &str) -> String {
    let keys = redis.query(&["--scan", "--pattern", "safe-python:*"]);
    assert!(
        !keys.contains(&handle[2..]),
        "a key shows the handle: {keys}"
    );
    let mut hashes: Vec<&str> = keys.lines().filter(|k| !k.ends_with(":lease")).collect();
    assert_eq!(hashes.len(), 1, "{keys}");
    hashes.pop().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_moves_between_replicas_and_outlives_a_killed_one() {
    let redis = Redis::start(false);
    let mut replicas: Vec<HttpServer> = (0..3).map(|_| replica(&redis, &[])).collect();
    let mut clients = Vec::new();
    for r in &replicas {
        clients.push(Some(r.client(modern(), None).await));
    }
    let id = start(clients[0].as_ref().unwrap(), "n = 0\nseen = []").await;
    let idle = redis.query(&["PTTL", &stored_key(&redis, &id)]);
    assert!(idle.parse::<i64>().unwrap() > 1_000_000, "TTL {idle}");
    for i in 1..=12u64 {
        if i == 4 {
            // SIGKILL: no chance to hand anything over.
            replicas[1].child.kill().unwrap();
            replicas[1].child.wait().unwrap();
            clients[1] = None;
        }
        if i == 8 {
            replicas[1] = replica(&redis, &[]);
            clients[1] = Some(replicas[1].client(modern(), None).await);
        }
        let at = (i % 3) as usize;
        let client = clients[at].as_ref().or(clients[0].as_ref()).unwrap();
        let code = format!("n += 1\nseen.append({at})\nn");
        let v = call(client, &code, Some(&id)).await;
        assert_eq!(v["result"], i.to_string(), "call {i}: {v}");
        assert_eq!(v["session"]["call"], i + 1, "{v}");
        assert!(
            v["session"]["stored_bytes"].as_u64().unwrap() < 1 << 20,
            "{v}"
        );
    }
    // A call stopped by a limit writes nothing: the next replica finds the state from before it.
    let stopped = clients[2].as_ref().unwrap();
    let reply = stopped
        .call_tool(run_python("n = -1\nwhile True: pass", Some(&id)))
        .await
        .unwrap();
    let v = structured(&reply);
    assert_eq!(v["limit"], "timeout", "{v}");
    assert_eq!(v["session"]["rolled_back"], true, "{v}");
    assert!(v["session"].get("stored_bytes").is_none(), "{v}");
    let v = call(clients[0].as_ref().unwrap(), "n, len(seen)", Some(&id)).await;
    assert_eq!(v["result"], "(12, 12)", "{v}");
    assert_eq!(v["session"]["call"], 15, "{v}");
    // Files go with the session: /data and /out, read back on another replica.
    let files = json!({"code": "open('/out/kept.txt', 'w').write('from ' + open('/data/in.txt').read())",
                       "session": id, "files": {"in.txt": "the client"}});
    let reply = clients[1]
        .as_ref()
        .unwrap()
        .call_tool(run_python_with(files))
        .await
        .unwrap();
    assert_eq!(reply.is_error, Some(false), "{}", text(&reply));
    let code = "open('/out/kept.txt').read() + ', ' + open('/data/in.txt').read()";
    let v = call(clients[2].as_ref().unwrap(), code, Some(&id)).await;
    assert_eq!(v["result"], "'from the client, the client'", "{v}");
    // `reset` empties the stored session too.
    let reset = json!({"code": "'n' in globals()", "session": id, "reset": true});
    let reply = clients[0]
        .as_ref()
        .unwrap()
        .call_tool(run_python_with(reset))
        .await
        .unwrap();
    assert_eq!(structured(&reply)["result"], "False", "{reply:?}");
    let v = call(clients[1].as_ref().unwrap(), "'n' in globals()", Some(&id)).await;
    assert_eq!(v["result"], "False", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_on_one_session_from_two_replicas_lose_no_update() {
    let redis = Redis::start(false);
    let replicas = [replica(&redis, &[]), replica(&redis, &[])];
    let a = replicas[0].client(modern(), None).await;
    let b = replicas[1].client(modern(), None).await;
    let id = start(&a, "n = 0").await;
    // Each call reads n, sleeps, then writes n + 1: two calls that overlapped would both write 1.
    let bump = "import time\nt = n\ntime.sleep(0.3)\nn = t + 1\nn";
    for _ in 0..3 {
        let (x, y) = tokio::join!(call(&a, bump, Some(&id)), call(&b, bump, Some(&id)));
        let mut got = [x["result"].clone(), y["result"].clone()];
        got.sort_by_key(|v| v.as_str().unwrap().to_owned());
        assert_ne!(got[0], got[1], "both calls ran on the same state: {x} {y}");
    }
    let v = call(&a, "n", Some(&id)).await;
    assert_eq!(v["result"], "6", "{v}");

    // A lease another replica holds: the call waits for it (a replica killed mid-call leaves one
    // that expires), and says the session is busy if it is not freed in time.
    let lease = format!("{}:lease", stored_key(&redis, &id));
    redis.query(&["SET", &lease, "another-replica", "PX", "1500"]);
    let started = Instant::now();
    let v = call(&b, "n += 1\nn", Some(&id)).await;
    assert_eq!(v["result"], "7", "{v}");
    assert!(
        started.elapsed() >= Duration::from_millis(1000),
        "it did not wait"
    );
    redis.query(&["SET", &lease, "another-replica", "PX", "60000"]);
    let said = refusal(&a, "n += 100", &id).await;
    assert!(said.contains("is running another call"), "{said}");
    redis.query(&["DEL", &lease]);
    let v = call(&a, "n", Some(&id)).await;
    assert_eq!(v["result"], "7", "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_stops_fails_session_calls_only_and_its_restart_is_survived() {
    let mut redis = Redis::start(true);
    let server = replica(&redis, &[]);
    let client = server.client(modern(), None).await;
    let id = start(&client, "kept = 41").await;
    redis.stop();
    let said = refusal(&client, "kept += 1", &id).await;
    assert!(
        said.contains("session store") && said.contains("without a session"),
        "{said}"
    );
    let said = refusal(&client, "x = 1", "new").await;
    assert!(said.contains("session store"), "{said}");
    assert_eq!(call(&client, "6 * 7", None).await["result"], "42");
    // Back, with its append-only file: the session is where it was.
    redis.restart();
    let v = call(&client, "kept += 1\nkept", Some(&id)).await;
    assert_eq!(v["result"], "42", "{v}");
    // A store that lost its data (no persistence, or flushed): a clear "start a new session".
    redis.query(&["FLUSHALL"]);
    let said = refusal(&client, "kept", &id).await;
    assert!(
        said.contains("in the session store") && said.contains("session: \"new\""),
        "{said}"
    );
    start(&client, "kept = 1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_stored_state_is_refused_with_a_reason_never_run() {
    let redis = Redis::start(false);
    let server = replica(&redis, &[]);
    let client = server.client(modern(), None).await;
    // Each edit also bumps the version, as a write by another replica would: no warm copy is used.
    let edits = [
        ("string.sub(s, 1, #s - 100)", "unreadable"),
        (
            "string.sub(s, 1, 200) .. 'X' .. string.sub(s, 202)",
            "unreadable",
        ),
        (
            "'SPYSESS' .. string.char(0, 99, 0, 0, 0) .. string.sub(s, 13)",
            "incompatible",
        ),
        ("'{\"x\": 1}'", "incompatible"),
        ("''", "incompatible"),
    ];
    for (edit, reason) in edits {
        let id = start(&client, "secret = 1").await;
        let key = stored_key(&redis, &id);
        let script = format!(
            "local s = redis.call('HGET', KEYS[1], 's'); \
             redis.call('HSET', KEYS[1], 's', {edit}); \
             return redis.call('HINCRBY', KEYS[1], 'v', 1)"
        );
        redis.query(&["EVAL", &script, "1", &key]);
        let said = refusal(&client, "secret", &id).await;
        assert!(
            said.contains(reason) && said.contains("session: \"new\""),
            "{edit}: {said}"
        );
        redis.query(&["DEL", &key]);
        // The replica goes on: fresh calls and new sessions.
        assert_eq!(call(&client, "1 + 1", None).await["result"], "2");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpython_session_with_the_data_stack_moves_between_replicas() {
    let redis = Redis::start(false);
    // The data stack in the template: its memory must be the same on both replicas.
    let args = crate::cpython::engine_args(&["--allow", "@data"]);
    let replicas = [replica(&redis, &args), replica(&redis, &args)];
    let a = replicas[0].client(modern(), None).await;
    let b = replicas[1].client(modern(), None).await;
    let id = start(
        &a,
        "import numpy as np, pandas as pd\na = np.arange(5)\nclass P:\n    k = 3",
    )
    .await;
    let v = call(&b, "a = a * P.k\nint(a.sum())", Some(&id)).await;
    assert_eq!(v["result"], "30", "{v}");
    let v = call(
        &a,
        "df = pd.DataFrame({'a': a})\nint(a.sum()) + P.k",
        Some(&id),
    )
    .await;
    assert_eq!(v["result"], "33", "{v}");
    let v = call(&b, "int(df['a'].max())", Some(&id)).await;
    assert_eq!(v["result"], "12", "{v}");
    // The template is the same on both replicas; what the calls draw is not.
    let draw = "import random\nrandom.getrandbits(64)";
    let (x, y) = (call(&a, draw, None).await, call(&b, draw, None).await);
    assert_ne!(
        x["result"], y["result"],
        "the replicas drew the same numbers"
    );
    let bytes = v["session"]["stored_bytes"].as_u64().unwrap();
    eprintln!("a CPython session with numpy and pandas: {bytes} stored bytes");
}

/// A store that accepts connections and never answers: session calls fail within the bound, the
/// server goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_never_answers_does_not_hang_the_server() {
    // The kernel completes connections to a listening socket that nobody reads from.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}/0", silent.local_addr().unwrap());
    let server = HttpServer::start(&["--http", "127.0.0.1:0", "--session-store", &url]);
    let client = server.client(modern(), None).await;
    let started = Instant::now();
    let said = refusal(&client, "x = 1", "new").await;
    assert!(
        said.contains("session store") && said.contains("no answer"),
        "{said}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(call(&client, "6 * 7", None).await["result"], "42");
}

/// `--check` with a store: says that it answers, and fails when it does not.
#[test]
fn check_says_whether_the_session_store_answers() {
    let mut redis = Redis::start(false);
    let url = redis.url();
    let checked = |url: &str| {
        let args = ["--check", "--session-store", url];
        crate::common::spawn::output(crate::common::spawn::mcp_server(&args), None)
    };
    let out = checked(&url);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    let said = format!("ok: the session store at {url} answers");
    assert!(stdout.contains(&said), "{stdout}");
    redis.stop();
    let out = checked(&url);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr.contains("session store"), "{stderr}");
}

/// `rediss://`: the store's certificate is verified (SSL_CERT_FILE names the roots to trust, as
/// for any client on the platform's roots), never skipped; and a password from the environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_store_with_a_password_is_used_only_when_verified() {
    let tls = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/tls");
    let (cert, key) = (
        tls.join("untrusted-cert.pem"),
        tls.join("untrusted-key.pem"),
    );
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let redis = Redis::start_with(
        false,
        &[
            "--port",
            "0",
            "--tls-port",
            "{port}",
            "--tls-cert-file",
            cert,
            "--tls-key-file",
            key,
            "--tls-auth-clients",
            "no",
            "--requirepass",
            "s3cret-for-the-store",
        ],
    );
    let url = format!("rediss://127.0.0.1:{}/0", redis.port);
    let args = ["--http", "127.0.0.1:0", "--session-store", &url];
    let password = ("SAFE_PYTHON_SESSION_STORE_PASSWORD", "s3cret-for-the-store");

    // A certificate nobody trusts: refused, and said.
    let untrusted = HttpServer::start_with(&args, &[password]);
    let client = untrusted.client(modern(), None).await;
    let said = refusal(&client, "x = 1", "new").await;
    assert!(said.contains("certificate"), "{said}");
    assert!(!said.contains("s3cret"), "{said}");

    // Trusted, but no password: refused by the store.
    let trusted = ("SSL_CERT_FILE", cert);
    let no_password = HttpServer::start_with(&args, &[trusted]);
    let client = no_password.client(modern(), None).await;
    let said = refusal(&client, "x = 1", "new").await;
    assert!(said.contains("session store"), "{said}");

    // Both: sessions work over TLS.
    let server = HttpServer::start_with(&args, &[trusted, password]);
    let client = server.client(modern(), None).await;
    let id = start(&client, "x = 20").await;
    assert_eq!(call(&client, "x + 1", Some(&id)).await["result"], "21");
    stored_key(&redis, &id);

    // Skipping verification is not offered.
    let insecure = format!("{url}#insecure");
    let out = crate::common::spawn::output(
        crate::common::spawn::mcp_server(&["--session-store", &insecure]),
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("always verified"));
}
