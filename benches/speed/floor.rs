//! The floor the `speed` bench measures the server against: an rmcp stdio server on the tool
//! router whose `run_python` does no work. The bench re-executes itself with [`FLOOR_ARG`] to
//! become it, so both servers run on the same machine, in the same minute, through the same client.

use std::process::Command;

use rmcp::handler::server::wrapper::Parameters;
use rmcp::{ServiceExt, tool, tool_router};

/// The argument that makes the bench the floor server.
pub const FLOOR_ARG: &str = "--floor-server";

/// `run_python`'s arguments, as the floor decodes them (it then ignores them).
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct FloorArgs {
    #[allow(dead_code)] // decoded, as the real server does, and not used
    code: String,
}

struct Floor;

#[tool_router(server_handler)]
impl Floor {
    #[tool(description = "Does nothing: the floor that safe-python-mcp is measured against.")]
    async fn run_python(&self, Parameters(_args): Parameters<FloorArgs>) -> String {
        String::new()
    }
}

/// Serves the floor on stdio until the client goes.
pub fn serve() -> anyhow::Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            Floor
                .serve(rmcp::transport::stdio())
                .await?
                .waiting()
                .await?;
            Ok(())
        })
}

/// The command that starts the floor: this bench again, with [`FLOOR_ARG`].
pub fn command() -> anyhow::Result<Command> {
    let mut command = Command::new(std::env::current_exe()?);
    command.arg(FLOOR_ARG);
    Ok(command)
}
