//! Plots on the CPython engine: matplotlib's figures come back as PNG images, bounded in size
//! and count, through the library, the MCP server and `sandbox-run --plots`.

use std::sync::Arc;

use crate::common::{self, client, cpython, spawn};
use crate::cpython::engine_args;
use safe_python_executor::outcome::{MAX_IMAGE_SIDE, MAX_IMAGES};
use safe_python_executor::{ImportPolicy, RunOptions, RunResult, Session};

fn matplotlib() -> RunOptions {
    RunOptions {
        policy: Arc::new(ImportPolicy::with_extra(["matplotlib"])),
        ..RunOptions::default()
    }
}

/// `code` after `import matplotlib.pyplot as plt`, run fresh; it must complete.
#[track_caller]
fn plot(code: &str) -> RunResult {
    let code = format!("import matplotlib.pyplot as plt\n{code}");
    let result = common::run_in(cpython(), &code, &matplotlib());
    assert!(!result.is_failure(), "{code}: {result:#?}");
    result
}

/// The width and height in the header of each image, which must be a PNG.
#[track_caller]
fn sizes(result: &RunResult) -> Vec<(u32, u32)> {
    result
        .images
        .iter()
        .map(|image| {
            assert_eq!(image.mime, "image/png");
            let data = &image.data;
            assert_eq!(data[..8], *b"\x89PNG\r\n\x1a\n", "the PNG signature");
            assert_eq!(data[12..16], *b"IHDR", "the header chunk comes first");
            let side = |at: usize| u32::from_be_bytes(data[at..at + 4].try_into().unwrap());
            let (width, height) = (side(16), side(20));
            assert!(width > 0 && height > 0, "{width}x{height}");
            (width, height)
        })
        .collect()
}

#[test]
fn open_and_shown_figures_come_back_as_pngs_and_closed_ones_do_not() {
    let one = plot("plt.plot([1, 3, 2])");
    assert_eq!(sizes(&one), [(640, 480)], "{one:#?}");
    assert_eq!(one.stderr, "", "no warning about show or the font cache");

    let shown = plot("plt.plot([1, 2])\nplt.show()\nplt.plot([2, 1])\nplt.title('after show')");
    assert_eq!(
        sizes(&shown).len(),
        2,
        "show sends, and more plotting starts anew"
    );
    assert_ne!(shown.images[0], shown.images[1]);

    let two = plot(
        "plt.figure()\nplt.plot([1])\nfig, ax = plt.subplots(figsize=(3, 2))\nax.bar(['a'], [1])",
    );
    assert_eq!(sizes(&two), [(640, 480), (300, 200)]);

    let closed = plot("plt.plot([1])\nplt.close()\nfig = plt.figure()\nplt.close(fig)");
    assert!(
        closed.images.is_empty() && closed.images_left_out == 0,
        "{closed:#?}"
    );

    let none = common::run_in(cpython(), "1 + 1", &matplotlib());
    assert!(none.images.is_empty());
}

#[test]
fn figures_are_bounded_in_count_and_size() {
    let many = plot(&format!(
        "for i in range({}):\n    plt.figure(figsize=(1, 1))",
        MAX_IMAGES + 4
    ));
    assert_eq!(many.images.len(), MAX_IMAGES);
    assert_eq!(many.images_left_out, 4, "{many:#?}");

    let huge = plot("plt.figure(figsize=(200, 200), dpi=100)\nplt.plot([1, 2])");
    let (width, height) = sizes(&huge)[0];
    assert!(
        width == height && width <= MAX_IMAGE_SIDE,
        "{width}x{height}"
    );
    assert!(
        huge.stderr
            .contains("figure 1 is 20000x20000 pixels: it is returned scaled down"),
        "{}",
        huge.stderr
    );
}

#[test]
fn figures_belong_to_their_session_call() {
    let runtime = common::runtime();
    let mut session = runtime
        .block_on(Session::new(cpython()))
        .expect("a session");
    let mut call = |code: &str| {
        let ran = runtime
            .block_on(session.run(code, &matplotlib()))
            .expect("no host fault");
        assert!(!ran.result.is_failure(), "{code}: {ran:#?}");
        ran.result
    };
    let first = call("import matplotlib.pyplot as plt\nplt.plot([1, 2])");
    assert_eq!(first.images.len(), 1);
    let next = call("len(plt.get_fignums())");
    assert_eq!(next.result(), Some("0"), "the figure was closed once sent");
    assert!(next.images.is_empty());
}

#[tokio::test]
async fn the_mcp_reply_carries_figures_as_image_content() {
    let args = engine_args(&["--allow", "matplotlib"]);
    let client = client::connect((), spawn::mcp_server(&args)).await;
    let tools = client.list_all_tools().await.expect("the tools");
    let description = tools[0].description.as_deref().unwrap_or_default();
    assert!(
        description.contains("Plots come back as PNG images"),
        "{description}"
    );
    let reply = client
        .call_tool(client::run_python(
            "import matplotlib.pyplot as plt\nplt.plot([1, 4, 9])\nprint('drawn')",
            None,
        ))
        .await
        .expect("a reply");
    let sent = serde_json::to_value(&reply).unwrap();
    let content = sent["content"].as_array().unwrap();
    assert_eq!(content.len(), 2, "{sent}");
    assert_eq!(content[0]["text"], "drawn\n1 figure follows as an image.\n");
    assert_eq!(content[1]["type"], "image");
    assert_eq!(content[1]["mimeType"], "image/png");
    let listed = &client::structured(&reply)["images"];
    assert_eq!(listed[0]["mime"], "image/png", "{listed}");
    assert_eq!(listed[0]["width"], 640);
    assert!(listed[0]["bytes"].as_u64().unwrap() > 1000);
    assert!(
        listed[0].get("data").is_none(),
        "no bytes in structured content"
    );
    client.cancel().await.expect("the server stops");
}

#[test]
fn sandbox_run_writes_plots_into_the_directory_and_follows_no_link() {
    let dir = common::temp_dir("plots");
    let plots = dir.path().join("out");
    let code = "import matplotlib.pyplot as plt\nplt.plot([1])\nplt.show()\nplt.plot([2])";
    let mut command = spawn::sandbox_run(&engine_args(&["--allow", "matplotlib", "-c", code]));
    command.arg("--plots").arg(&plots);
    let out = spawn::output(command, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for name in ["plot-1.png", "plot-2.png"] {
        let bytes = std::fs::read(plots.join(name)).expect(name);
        assert!(bytes.starts_with(b"\x89PNG"), "{name}");
        assert!(stderr.contains(name), "{stderr}");
    }

    // Without --plots, stderr says how to get them.
    let out = spawn::output(
        spawn::sandbox_run(&engine_args(&["--allow", "matplotlib", "-c", code])),
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("returned 2 figures; add --plots DIR"),
        "{stderr}"
    );

    #[cfg(unix)]
    {
        let outside = dir.path().join("outside.txt");
        std::fs::write(&outside, "keep").unwrap();
        std::fs::remove_file(plots.join("plot-1.png")).unwrap();
        std::os::unix::fs::symlink(&outside, plots.join("plot-1.png")).unwrap();
        let mut command = spawn::sandbox_run(&engine_args(&["--allow", "matplotlib", "-c", code]));
        command.arg("--plots").arg(&plots);
        let out = spawn::output(command, None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(
            stderr.contains("plot-1.png: it exists and is not a regular file"),
            "{stderr}"
        );
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep");
    }
}
