//! Code mode in the MCP server: what the `run_python` description says about the upstreams'
//! tools, and the catalogue that fills it in once the upstreams have started in the background
//! (the server's own start never waits for them).

use std::sync::{Arc, RwLock};

use rmcp::service::{Peer, RoleServer};
use tokio::sync::Mutex;

use crate::toolcalls::{ServerTools, ToolAccess, python_signature};

/// The most tool signatures the description lists: past them, `tools.search` finds the rest, so
/// that a server with hundreds of tools does not flood the model's context.
pub const MAX_LISTED_SIGNATURES: usize = 40;

/// The longest signature listed as it is; longer ones are cut with `...`.
const MAX_SIGNATURE_CHARS: usize = 160;

/// The upstreams' part of the description, for the catalogue as far as it is known (`None`:
/// the upstreams are still starting).
pub fn description(access: &ToolAccess, catalogue: Option<&[ServerTools]>) -> String {
    let policy = &access.policy;
    let mut text = format!(
        "- Tools of other MCP servers can be called from the code (code mode): `import tools`, then \
         `tools.SERVER.TOOL(**arguments)` (or `tools.call(\"SERVER\", \"TOOL\", **arguments)`, which \
         works whatever the tool's name) returns the tool's structured content (a dict) when it has \
         some, else its text. A tool's error raises `tools.ToolError`. Prefer one program that \
         makes all the calls, filters and combines their results, and prints only the answer: the \
         results in between stay out of the conversation. Under asyncio, `await \
         tools.SERVER.TOOL.acall(...)` runs independent calls concurrently. At most {} calls per \
         run; each counts against the time limit. `help(tools.SERVER.TOOL)` shows a tool's \
         description and schema, `tools.search(\"words\")` finds tools.",
        policy.max_calls
    );
    let Some(catalogue) = catalogue else {
        let servers = access.host.servers().join(", ");
        text.push_str(&format!(
            " Servers: {servers} (their tools are being listed: use `tools.search(\"\")`)."
        ));
        return text;
    };
    text.push_str(" The tools:");
    let mut listed = 0;
    let mut more = 0;
    for server in catalogue {
        match &server.tools {
            Err(reason) => text.push_str(&format!(
                "\n  - server {} is not available: {}",
                server.server,
                cut(reason, MAX_SIGNATURE_CHARS)
            )),
            Ok(tools) => {
                for tool in tools.iter().filter(|t| policy.allows(&t.server, &t.name)) {
                    if listed == MAX_LISTED_SIGNATURES {
                        more += 1;
                        continue;
                    }
                    let signature = python_signature(&tool.server, &tool.name, &tool.input_schema);
                    let summary = tool.description.lines().next().unwrap_or_default();
                    let line = if summary.is_empty() {
                        signature
                    } else {
                        format!("{signature}: {summary}")
                    };
                    text.push_str(&format!("\n  - {}", cut(&line, MAX_SIGNATURE_CHARS)));
                    listed += 1;
                }
            }
        }
    }
    if more > 0 {
        text.push_str(&format!(
            "\n  - and {more} more: use `tools.search(\"words\")`"
        ));
    }
    text
}

/// `s` cut to `max` characters, with `...`.
fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((at, _)) => format!("{}...", &s[..at]),
        None => s.to_owned(),
    }
}

/// The catalogue once the upstreams have started, and the peers to tell when it arrives.
#[derive(Default)]
pub struct Catalogue {
    known: RwLock<Option<Arc<Vec<ServerTools>>>>,
    /// Clients connected before the catalogue was known: told `notifications/tools/list_changed`
    /// when it is.
    waiting: Mutex<Vec<Peer<RoleServer>>>,
}

impl Catalogue {
    /// Starts listing the upstreams' tools in the background (which starts the upstreams).
    pub fn start(access: &ToolAccess) -> Arc<Catalogue> {
        let catalogue = Arc::new(Catalogue::default());
        let (host, filled) = (access.host.clone(), catalogue.clone());
        tokio::spawn(async move {
            let listed = host.catalogue(None).await;
            for server in &listed {
                match &server.tools {
                    Ok(tools) => {
                        tracing::info!("upstream {}: {} tools", server.server, tools.len())
                    }
                    Err(e) => tracing::warn!("upstream {} is not available: {e}", server.server),
                }
            }
            *filled.known.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(listed));
            for peer in filled.waiting.lock().await.drain(..) {
                let _ = peer.notify_tool_list_changed().await;
            }
        });
        catalogue
    }

    pub fn known(&self) -> Option<Arc<Vec<ServerTools>>> {
        self.known.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Remembers `peer` to tell it when the catalogue is known, unless it is already.
    pub async fn tell_when_known(&self, peer: Peer<RoleServer>) {
        let mut waiting = self.waiting.lock().await;
        if self.known().is_none() {
            waiting.push(peer);
        }
    }
}
