//! A WebSocket client (RFC 6455) small enough to read, for tests and benchmarks of the
//! sessions' proxy.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A WebSocket client of just what the tests and benchmarks need: masked frames out, unmasked
/// frames in, each message one frame.
#[derive(Debug)]
pub struct WebSocket(tokio::net::TcpStream);

impl WebSocket {
    /// Opens `path` on `address` (`HOST:PORT`) with the bearer `token`; the status line and
    /// headers when refused.
    pub async fn open(address: &str, path: &str, token: &str) -> Result<Self, String> {
        let mut tcp = tokio::net::TcpStream::connect(address).await.unwrap();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nConnection: Upgrade\r\n\
             Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        );
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
        // RFC 6455's own example key and answer.
        assert!(head.to_ascii_lowercase().contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="), "{head}");
        Ok(WebSocket(tcp))
    }

    /// Sends one frame of `opcode` (1 text, 2 binary) holding `message`.
    pub async fn send(&mut self, opcode: u8, message: &[u8]) {
        let mask = [0x12u8, 0x34, 0x56, 0x78];
        let mut frame = vec![0x80 | opcode];
        match message.len() {
            n if n < 126 => frame.push(0x80 | n as u8),
            n if n < 65536 => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&mask);
        frame.extend(message.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        self.0.write_all(&frame).await.unwrap();
    }

    /// The next whole frame: its opcode and payload.
    pub async fn receive(&mut self) -> (u8, Vec<u8>) {
        tokio::time::timeout(Duration::from_secs(30), async {
            let mut head = [0u8; 2];
            self.0.read_exact(&mut head).await.unwrap();
            assert_eq!(head[0] & 0x80, 0x80, "one final frame");
            let length = match head[1] & 127 {
                126 => u64::from(self.0.read_u16().await.unwrap()),
                127 => self.0.read_u64().await.unwrap(),
                n => u64::from(n),
            };
            let mut data = vec![0; length as usize];
            self.0.read_exact(&mut data).await.unwrap();
            (head[0] & 15, data)
        })
        .await
        .expect("a frame within 30 s")
    }

    /// Sends `message` as one binary frame and reads the frame that comes back.
    pub async fn echo(&mut self, message: &[u8]) -> Vec<u8> {
        self.send(2, message).await;
        let (opcode, data) = self.receive().await;
        assert_eq!(opcode, 2, "a binary frame back");
        data
    }
}
