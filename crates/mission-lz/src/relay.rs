//! `mission lz-relay PORT`: the agent's way onto a batch system's node. The Slurm runner starts
//! it inside a running session job's allocation (`srun --jobid … --overlap`), where it joins its
//! stdin and stdout to the session's port on the node's loopback: the agent on the login node
//! then speaks HTTP to the app through `srun` as if it were local. With `--probe` it only says
//! whether the port answers (exit 0) or not (exit 1).

use tokio::io::AsyncWriteExt;

/// Joins stdin and stdout to `127.0.0.1:port` until either side ends.
pub async fn relay(port: u16) -> std::io::Result<()> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let _ = tcp.set_nodelay(true);
    let (mut from_app, mut to_app) = tcp.into_split();
    let (mut stdin, mut stdout) = (tokio::io::stdin(), tokio::io::stdout());
    let inbound = async {
        let copied = tokio::io::copy(&mut stdin, &mut to_app).await;
        let _ = to_app.shutdown().await;
        copied
    };
    let outbound = async {
        let copied = tokio::io::copy(&mut from_app, &mut stdout).await;
        let _ = stdout.flush().await;
        copied
    };
    // The app's end of the answer ends the relay (an idle kept-alive request side may never).
    tokio::select! {
        copied = outbound => copied.map(drop),
        copied = inbound => {
            copied?;
            let mut stdout = tokio::io::stdout();
            tokio::io::copy(&mut from_app, &mut stdout).await.map(drop)
        }
    }
}

/// Whether `127.0.0.1:port` answers.
pub async fn probe(port: u16) -> bool {
    tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok()
}
