//! A WebSocket client for tests and benchmarks of the sessions' proxy and the job shell: the
//! handshake by hand (so a test sees a refusal's status line), the framing of
//! [`mission_tunnel::websocket`].

use std::time::Duration;

use mission_tunnel::websocket::{self, Message, Opcode, Role};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Halves = (websocket::Reader<tokio::io::ReadHalf<TcpStream>>, websocket::Writer<tokio::io::WriteHalf<TcpStream>>);

/// A WebSocket client connection.
#[derive(Debug)]
pub struct WebSocket {
    reader: websocket::Reader<tokio::io::ReadHalf<TcpStream>>,
    writer: websocket::Writer<tokio::io::WriteHalf<TcpStream>>,
}

impl WebSocket {
    /// Opens `path` on `address` (`HOST:PORT`) with the bearer `token`; the status line and
    /// headers when refused.
    pub async fn open(address: &str, path: &str, token: &str) -> Result<Self, String> {
        Self::open_with(address, path, &[("Authorization", &format!("Bearer {token}"))]).await
    }

    /// Opens `path` on `address` with `headers` besides the handshake's own.
    pub async fn open_with(address: &str, path: &str, headers: &[(&str, &str)]) -> Result<Self, String> {
        let (reader, writer) = handshake(address, path, headers).await?;
        Ok(WebSocket { reader, writer })
    }

    /// Sends one frame of `opcode` holding `message`.
    pub async fn send(&mut self, opcode: Opcode, message: &[u8]) {
        self.writer.send(opcode, message).await.unwrap();
    }

    /// The next message, within 30 s; `None` when the connection ended.
    pub async fn receive(&mut self) -> Option<Message> {
        tokio::time::timeout(Duration::from_secs(30), self.reader.receive())
            .await
            .expect("a message within 30 s")
            .unwrap()
    }

    /// Sends `message` as one binary frame and reads the frame that comes back.
    pub async fn echo(&mut self, message: &[u8]) -> Vec<u8> {
        self.send(Opcode::Binary, message).await;
        let answer = self.receive().await.expect("an answer");
        assert_eq!(answer.opcode, Opcode::Binary, "a binary frame back");
        answer.payload
    }
}

async fn handshake(address: &str, path: &str, headers: &[(&str, &str)]) -> Result<Halves, String> {
    let mut tcp = TcpStream::connect(address).await.unwrap();
    let key = websocket::new_key();
    let mut request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {key}\r\n"
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8];
        tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut byte)).await.unwrap().unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    if !head.starts_with("HTTP/1.1 101") {
        return Err(head);
    }
    let accept = format!("sec-websocket-accept: {}", websocket::accept_key(&key)).to_ascii_lowercase();
    assert!(head.to_ascii_lowercase().contains(&accept), "{head}");
    Ok(websocket::split(tcp, Role::Client, 64 << 20))
}
