//! Code mode against MCP servers no one here wrote, through the real `safe-python-mcp` and a real
//! MCP client: `@modelcontextprotocol/server-everything` (npm) over stdio and over streamable
//! HTTP, and `mcp-server-time` (PyPI), installed by [`crate::common::upstreams`]. Also the
//! README's code-mode example, run as it is shown.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use std::sync::{Arc, Mutex};

use rmcp::model::{CallToolResult, ProgressNotificationParam};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};
use serde_json::Value;

use crate::common::client::{self, Client, connect, run_python, structured, text};
use crate::common::fenced_blocks;
use crate::common::spawn::mcp_server;
use crate::common::upstreams::{everything, everything_command, time_server};
use crate::install::read;

/// What the server under test has in its environment, which its upstreams inherit:
/// server-everything's `get-env` would show it, so the policy must keep that tool out of reach.
const SECRET: (&str, &str) = ("CODE_MODE_TEST_SECRET", "hunter2-do-not-leak");

fn time_command() -> String {
    time_server().display().to_string()
}

/// What the server sent as progress (live output), all calls together.
#[derive(Clone, Default)]
struct Heard(Arc<Mutex<String>>);

impl ClientHandler for Heard {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(message) = params.message {
            self.0.lock().unwrap().push_str(&message);
        }
    }
}

/// `safe-python-mcp` with `args` (and the secret in its environment), connected.
async fn server(args: &[&str]) -> Client<Heard> {
    let mut command = mcp_server(args);
    command.env(SECRET.0, SECRET.1);
    connect(Heard::default(), command).await
}

async fn call(client: &Client<Heard>, code: &str) -> CallToolResult {
    client
        .call_tool(run_python(code, None))
        .await
        .expect("the server answers")
}

/// The structured report's `result`, after checking the call completed.
async fn value(client: &Client<Heard>, code: &str) -> String {
    let reply = call(client, code).await;
    let report = structured(&reply);
    assert_eq!(report["error"], Value::Null, "{code}: {}", text(&reply));
    report["result"].as_str().unwrap_or("None").to_owned()
}

fn demo(tools: &str, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--upstream".to_owned(),
        format!("demo={}", everything_command()),
        "--tools".to_owned(),
        tools.to_owned(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_code_mode_example_replies_what_the_readme_shows() {
    let readme = read("README.md");
    let section = readme
        .split("## Code mode")
        .nth(1)
        .expect("the README has a code-mode section");
    let section = section.split("\n## ").next().unwrap();
    let config: Value = serde_json::from_str(&fenced_blocks(section, "json")[0]).unwrap();
    let server_args: Vec<String> = crate::install::strings(&config["mcpServers"]["python"]["args"]);
    // The configuration's upstream runs with `npx -y`; here, the same package, installed.
    let args: Vec<String> = server_args
        .iter()
        .skip_while(|a| *a != "--upstream")
        .map(|a| {
            a.replace(
                "npx -y @modelcontextprotocol/server-everything",
                &everything_command(),
            )
        })
        .collect();
    assert!(
        args.iter().any(|a| a.starts_with("demo=")),
        "{server_args:?}"
    );
    let client = server(&strs(&args)).await;
    let code = &fenced_blocks(section, "python")[0];
    let shown = &fenced_blocks(section, "text")[0];
    let reply = call(&client, code).await;
    assert_eq!(
        text(&reply).trim(),
        shown.trim(),
        "the README shows another reply"
    );
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio() {
    let allowed = "demo.echo,demo.get-sum,demo.get-structured-content,demo.get-tiny-image,\
                   demo.trigger-long-running-operation";
    let args = demo(allowed, &["--max-tool-calls", "150", "--timeout", "8"]);
    let client = server(&strs(&args)).await;

    // The description lists the tools as Python signatures once they are known.
    let started = Instant::now();
    let description = loop {
        let tools = client.list_all_tools().await.unwrap();
        let d = tools[0].description.clone().unwrap_or_default().to_string();
        if d.contains("tools.demo.get_sum(") || started.elapsed() > Duration::from_secs(60) {
            break d;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        description.contains("tools.demo.get_sum(a: float, b: float)"),
        "{description}"
    );
    assert!(
        !description.contains("get_env"),
        "a tool outside --tools is listed: {description}"
    );

    // A plain call, and structured content as a dict.
    assert_eq!(
        value(&client, "import tools\ntools.demo.echo(message='hi')").await,
        "'Echo: hi'"
    );
    assert_eq!(
        value(
            &client,
            "import tools\ntools.demo.get_structured_content(location='Chicago')['temperature']"
        )
        .await,
        "36"
    );
    // An image comes back as an object.
    assert_eq!(
        value(&client, "import tools\nr = tools.demo.get_tiny_image()\n[type(b).__name__ for b in r if not isinstance(b, str)][:1]").await,
        "['Image']"
    );

    // Many calls in one run: the reply stays small, and counts them.
    let reply = call(&client, "import tools\nt = 0\nfor i in range(100):\n    t = float(tools.demo.get_sum(a=t, b=i).split()[-1].rstrip('.'))\nt").await;
    let report = structured(&reply);
    assert_eq!(report["result"], "4950.0", "{}", text(&reply));
    assert_eq!(report["tool_calls"]["count"], 100);
    let size = serde_json::to_string(&reply).unwrap().len();
    assert!(size < 12 << 10, "a {size}-byte reply for 100 calls");
    // Each call showed in the live output as it finished.
    let heard = client.service().0.lock().unwrap().clone();
    assert!(
        heard.contains("[tool call] demo.get-sum: ok in "),
        "{heard}"
    );

    // The tool's own error is caught in Python.
    assert_eq!(
        value(&client, "import tools\ntry:\n    tools.demo.get_sum(a='x', b=1)\nexcept tools.ToolError as e:\n    m = 'Input validation error' in str(e)\nm").await,
        "True"
    );

    // A tool outside --tools: refused on the host, and the upstream's environment never shows.
    let reply = call(&client, "import tools\ntry:\n    tools.call('demo', 'get-env')\nexcept PermissionError as e:\n    m = str(e)\nm").await;
    assert!(
        text(&reply).contains("may not be called"),
        "{}",
        text(&reply)
    );
    assert!(!serde_json::to_string(&reply).unwrap().contains(SECRET.1));

    // The budget.
    assert_eq!(
        value(&client, "import tools\nn = 0\ntry:\n    while True:\n        tools.demo.echo(message='x')\n        n += 1\nexcept tools.CallBudgetExceeded:\n    pass\nn").await,
        "150"
    );

    // The time limit reaches a long call upstream, and the server stays healthy.
    let started = Instant::now();
    let reply = call(
        &client,
        "import tools\ntools.demo.trigger_long_running_operation(duration=60, steps=60)",
    )
    .await;
    assert_eq!(structured(&reply)["limit"], "timeout", "{}", text(&reply));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(structured(&reply)["tool_calls"]["calls"][0]["ok"], false);
    assert_eq!(
        value(&client, "import tools\ntools.demo.echo(message='after')").await,
        "'Echo: after'"
    );

    // So does a client's cancellation.
    let started = Instant::now();
    client::cancel_after(
        &client,
        run_python(
            "import tools\ntools.demo.trigger_long_running_operation(duration=60, steps=60)",
            None,
        ),
        Duration::from_millis(1500),
    )
    .await;
    assert_eq!(
        value(&client, "import tools\ntools.demo.echo(message='again')").await,
        "'Echo: again'"
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "the cancelled call held the server"
    );

    // Concurrently under asyncio (allowed with upstreams): five 1-second calls well under 5 s.
    let started = Instant::now();
    assert_eq!(
        value(&client, "import asyncio, tools\nasync def main():\n    return await asyncio.gather(*(tools.demo.trigger_long_running_operation.acall(duration=1, steps=1) for _ in range(5)))\nlen(asyncio.run(main()))").await,
        "5"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
    client.cancel().await.unwrap();
}

/// Through `--upstream-config`, the `mcpServers` file of Claude Desktop and Cursor as it is: a
/// disabled entry is skipped, and `${VAR}` comes from the environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_time_from_pypi_through_a_clients_config_file() {
    let dir = crate::common::temp_dir("code-mode-config");
    let config = dir.path().join("claude_desktop_config.json");
    let entries = serde_json::json!({"mcpServers": {
        "time": {"command": time_command(), "args": [], "env": {"TZ_NOTE": "${CODE_MODE_TEST_SECRET}"}},
        "off": {"command": "/nonexistent/server", "disabled": true},
    }});
    std::fs::write(&config, entries.to_string()).unwrap();
    let client = server(&["--upstream-config", config.to_str().unwrap()]).await;
    assert_eq!(
        value(&client, "import tools\ntry:\n    tools.call('off', 'x')\nexcept ValueError:\n    m = 'not configured'\nm").await,
        "'not configured'"
    );
    let zone = value(&client, "import tools, json\nr = tools.time.get_current_time(timezone='UTC')\nr = r if isinstance(r, dict) else json.loads(r)\nr['timezone']").await;
    assert_eq!(zone, "'UTC'");
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashing_or_hanging_upstream_gives_a_clear_error_and_the_rest_work() {
    let demo = format!("demo={}", everything_command());
    let client = server(&[
        "--upstream",
        "crash=sh -c 'echo no credentials >&2; exit 3'",
        "--upstream",
        "hang=sleep 600",
        "--upstream",
        &demo,
        "--timeout",
        "6",
    ])
    .await;
    let code = "import tools\nout = []\nfor server in ('crash', 'hang'):\n    try:\n        tools.call(server, 'x')\n    except tools.UpstreamError as e:\n        out.append(str(e))\nout.append(tools.demo.echo(message='fine'))\nout";
    let started = Instant::now();
    let reply = call(&client, code).await;
    let report = structured(&reply);
    assert_eq!(report["error"], Value::Null, "{}", text(&reply));
    let result = report["result"].as_str().unwrap();
    assert!(result.contains("no credentials"), "{result}");
    assert!(result.contains("still starting"), "{result}");
    assert!(result.contains("Echo: fine"), "{result}");
    assert!(started.elapsed() < Duration::from_secs(8));
    client.cancel().await.unwrap();
}

/// server-everything over streamable HTTP on a free loopback port.
struct HttpEverything(Child, u16);

impl HttpEverything {
    fn start() -> HttpEverything {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (node, entry) = everything();
        let child = Command::new(node)
            .arg(entry)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "server-everything did not listen"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        HttpEverything(child, port)
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_streamable_http() {
    let upstream = HttpEverything::start();
    let url = format!("demo=http://127.0.0.1:{}/mcp", upstream.1);
    let client = server(&["--upstream", &url, "--timeout", "6"]).await;
    assert_eq!(
        value(
            &client,
            "import tools\ntools.demo.echo(message='over http')"
        )
        .await,
        "'Echo: over http'"
    );
    assert_eq!(
        value(
            &client,
            "import tools\ntools.demo.get_structured_content(location='New York')['humidity']"
        )
        .await,
        "82"
    );
    let reply = call(
        &client,
        "import tools\ntools.demo.trigger_long_running_operation(duration=60, steps=60)",
    )
    .await;
    assert_eq!(structured(&reply)["limit"], "timeout", "{}", text(&reply));
    assert_eq!(
        value(&client, "import tools\ntools.demo.echo(message='still')").await,
        "'Echo: still'"
    );
    client.cancel().await.unwrap();
}
