//! The server on stdio, telling sessions when each reply is out (see [`Flushes`]).

use rmcp::ServiceExt;

use super::flushes::Flushes;
use super::{PythonServer, termination};
use crate::session::registry::RepliesOut;

/// Serves one client on stdio until it closes stdin (in-flight calls get rmcp's 5 s to finish) or
/// the process is asked to stop (SIGTERM, or SIGINT / Ctrl-C): then runs in progress are dropped,
/// which stops them, and the server exits 0 at once. A client that closes stdin before it has
/// initialized is no failure either.
pub async fn serve(server: PythonServer, replies: RepliesOut) -> anyhow::Result<()> {
    let session = async {
        let (stdin, stdout) = rmcp::transport::stdio();
        let stdout = Flushes::new(stdout, replies);
        let service = match server.serve((stdin, stdout)).await {
            Ok(service) => service,
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => {
                tracing::info!("the client closed stdin before initializing");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        service.waiting().await?;
        Ok(())
    };
    tokio::select! {
        ended = session => ended,
        signal = termination() => {
            tracing::info!("{signal}: stopping the runs in progress and exiting");
            Ok(())
        }
    }
}
