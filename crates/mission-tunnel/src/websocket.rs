//! WebSocket framing (RFC 6455), both ends: the job shell's agent end (a server) and its CLI
//! end (a client) speak it, and the tests use it to talk to sessions' apps.
//!
//! Frames are read into whole messages of at most a bound the reader is given (a longer one is
//! refused with close code 1009, not buffered); control frames come back as they arrive, between
//! the fragments of a message too, and the caller answers a ping. A client masks what it sends
//! (with a fresh random mask per frame), a server never does; each end refuses the other's
//! mistakes of masking as a protocol error.

use std::io;

use base64::Engine as _;
use ring::rand::SecureRandom;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Which end of the connection this is: a client masks its frames, a server does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The end that opened the connection: it masks its frames.
    Client,
    /// The end that accepted it.
    Server,
}

/// The kind of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// A text message (UTF-8).
    Text,
    /// A binary message.
    Binary,
    /// The end of the connection: a status code and a reason.
    Close,
    /// A ping, which the other end answers with a pong of the same payload.
    Ping,
    /// The answer to a ping.
    Pong,
}

impl Opcode {
    fn code(self) -> u8 {
        match self {
            Self::Text => 1,
            Self::Binary => 2,
            Self::Close => 8,
            Self::Ping => 9,
            Self::Pong => 10,
        }
    }
}

/// One whole message (or control frame).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Its kind.
    pub opcode: Opcode,
    /// Its bytes, unmasked.
    pub payload: Vec<u8>,
}

impl Message {
    /// A close frame's status code and reason, if it has them.
    pub fn close_reason(&self) -> Option<(u16, String)> {
        let code = self.payload.get(..2)?;
        Some((u16::from_be_bytes([code[0], code[1]]), String::from_utf8_lossy(&self.payload[2..]).into_owned()))
    }
}

/// Close code: the message was longer than the reader takes.
pub const CLOSE_TOO_BIG: u16 = 1009;
/// Close code: the other end broke the protocol.
pub const CLOSE_PROTOCOL_ERROR: u16 = 1002;
/// Close code: a normal end.
pub const CLOSE_NORMAL: u16 = 1000;

/// The `Sec-WebSocket-Accept` answer to a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, format!("{key}{GUID}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// A fresh `Sec-WebSocket-Key` for a client's handshake.
pub fn new_key() -> String {
    base64::engine::general_purpose::STANDARD.encode(random::<16>())
}

fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    ring::rand::SystemRandom::new().fill(&mut bytes).expect("the system's randomness");
    bytes
}

/// The reading half of a WebSocket.
#[derive(Debug)]
pub struct Reader<R> {
    io: R,
    role: Role,
    max_message: usize,
    /// The fragments of a message read so far (a control frame may come between them).
    partial: Option<(Opcode, Vec<u8>)>,
}

/// The writing half of a WebSocket.
#[derive(Debug)]
pub struct Writer<W> {
    io: W,
    role: Role,
}

/// Splits `io`, a connection after its handshake, into the halves of a WebSocket of `role`
/// whose reader takes messages of at most `max_message` bytes.
pub fn split<IO: AsyncRead + AsyncWrite>(
    io: IO,
    role: Role,
    max_message: usize,
) -> (Reader<tokio::io::ReadHalf<IO>>, Writer<tokio::io::WriteHalf<IO>>) {
    let (reader, writer) = tokio::io::split(io);
    (Reader { io: reader, role, max_message, partial: None }, Writer { io: writer, role })
}

/// Why a message could not be read: the connection failed, or the other end broke the
/// protocol (the close code to answer with, and why).
#[derive(Debug)]
pub enum ReadError {
    /// The connection failed.
    Io(io::Error),
    /// The other end broke the protocol: the close code to answer with, and why.
    Protocol(u16, String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => write!(f, "{e}"),
            Self::Protocol(code, why) => write!(f, "{why} (close code {code})"),
        }
    }
}

impl std::error::Error for ReadError {}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

impl<R: AsyncRead + Unpin> Reader<R> {
    /// The next whole message or control frame; `None` when the connection ends.
    pub async fn receive(&mut self) -> Result<Option<Message>, ReadError> {
        loop {
            let mut head = [0u8; 2];
            match self.io.read_exact(&mut head).await {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && self.partial.is_none() => return Ok(None),
                Err(e) => return Err(e.into()),
            }
            let (fin, code, masked) = (head[0] & 0x80 != 0, head[0] & 0x0f, head[1] & 0x80 != 0);
            if head[0] & 0x70 != 0 {
                return Err(protocol("a frame with reserved bits set"));
            }
            if masked != (self.role == Role::Server) {
                return Err(protocol(if masked {
                    "a masked frame from a server"
                } else {
                    "an unmasked frame from a client"
                }));
            }
            let length = match head[1] & 0x7f {
                126 => u64::from(self.io.read_u16().await?),
                127 => self.io.read_u64().await?,
                n => u64::from(n),
            };
            let so_far = self.partial.as_ref().map_or(0, |(_, data)| data.len() as u64);
            if length.saturating_add(so_far) > self.max_message as u64 {
                return Err(ReadError::Protocol(CLOSE_TOO_BIG, format!("a message over {} bytes", self.max_message)));
            }
            let mask = if masked {
                let mut mask = [0u8; 4];
                self.io.read_exact(&mut mask).await?;
                Some(mask)
            } else {
                None
            };
            let mut payload = vec![0u8; length as usize];
            self.io.read_exact(&mut payload).await?;
            if let Some(mask) = mask {
                payload.iter_mut().enumerate().for_each(|(i, byte)| *byte ^= mask[i % 4]);
            }
            let opcode = match code {
                0 => None,
                1 => Some(Opcode::Text),
                2 => Some(Opcode::Binary),
                8 => Some(Opcode::Close),
                9 => Some(Opcode::Ping),
                10 => Some(Opcode::Pong),
                other => return Err(protocol(&format!("a frame of unknown opcode {other}"))),
            };
            match opcode {
                Some(control @ (Opcode::Close | Opcode::Ping | Opcode::Pong)) => {
                    if !fin || payload.len() > 125 {
                        return Err(protocol("a fragmented or long control frame"));
                    }
                    return Ok(Some(Message { opcode: control, payload }));
                }
                Some(data) => {
                    if self.partial.is_some() {
                        return Err(protocol("a new message inside a fragmented one"));
                    }
                    self.partial = Some((data, payload));
                }
                None => match &mut self.partial {
                    Some((_, data)) => data.extend_from_slice(&payload),
                    None => return Err(protocol("a continuation frame with no message to continue")),
                },
            }
            if fin {
                let (opcode, payload) = self.partial.take().expect("set above");
                return Ok(Some(Message { opcode, payload }));
            }
        }
    }
}

fn protocol(why: &str) -> ReadError {
    ReadError::Protocol(CLOSE_PROTOCOL_ERROR, why.to_owned())
}

impl<W: AsyncWrite + Unpin> Writer<W> {
    /// Sends `payload` as one frame of `opcode`.
    pub async fn send(&mut self, opcode: Opcode, payload: &[u8]) -> io::Result<()> {
        let mut frame = Vec::with_capacity(payload.len() + 14);
        frame.push(0x80 | opcode.code());
        let mask_bit = if self.role == Role::Client { 0x80 } else { 0 };
        match payload.len() {
            n if n < 126 => frame.push(mask_bit | n as u8),
            n if n < 65536 => {
                frame.push(mask_bit | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(mask_bit | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        if self.role == Role::Client {
            let mask = random::<4>();
            frame.extend_from_slice(&mask);
            frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        } else {
            frame.extend_from_slice(payload);
        }
        self.io.write_all(&frame).await?;
        self.io.flush().await
    }

    /// Sends a close frame with `code` and `reason` (cut to fit a control frame).
    pub async fn close(&mut self, code: u16, reason: &str) -> io::Result<()> {
        let mut payload = code.to_be_bytes().to_vec();
        let mut cut = reason.len().min(123);
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        payload.extend_from_slice(&reason.as_bytes()[..cut]);
        self.send(Opcode::Close, &payload).await?;
        self.io.shutdown().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_key_is_rfc_6455s_example() {
        assert_eq!(accept_key("dGhlIHNhbXBsZSBub25jZQ=="), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        assert_eq!(new_key().len(), 24);
    }

    #[tokio::test]
    async fn messages_cross_both_ways_fragmented_or_not_and_oversized_ones_are_refused() {
        let (client, server) = tokio::io::duplex(1 << 20);
        let (_, mut to_server) = split(client, Role::Client, 1024);
        let (mut from_client, _) = split(server, Role::Server, 1024);
        to_server.send(Opcode::Binary, b"hello").await.unwrap();
        let got = from_client.receive().await.unwrap().unwrap();
        assert_eq!((got.opcode, got.payload.as_slice()), (Opcode::Binary, &b"hello"[..]));
        let long = vec![7u8; 300];
        to_server.send(Opcode::Text, &long).await.unwrap();
        assert_eq!(from_client.receive().await.unwrap().unwrap().payload, long);

        // Two fragments around a ping: the ping first, then the whole message.
        to_server.io.write_all(&masked_frame(0x01, b"frag")).await.unwrap();
        to_server.send(Opcode::Ping, b"p").await.unwrap();
        to_server.io.write_all(&masked_frame(0x80, b"ment")).await.unwrap();
        assert_eq!(
            from_client.receive().await.unwrap().unwrap(),
            Message { opcode: Opcode::Ping, payload: b"p".to_vec() }
        );
        assert_eq!(from_client.receive().await.unwrap().unwrap().payload, b"fragment");

        to_server.send(Opcode::Binary, &[0u8; 2000]).await.unwrap();
        assert!(matches!(from_client.receive().await, Err(ReadError::Protocol(CLOSE_TOO_BIG, _))));
    }

    #[tokio::test]
    async fn a_server_refuses_unmasked_frames_and_a_close_says_why() {
        let (client, server) = tokio::io::duplex(1024);
        let (mut from_server, mut to_server) = split(client, Role::Server, 1024);
        let (mut from_client, mut to_client) = split(server, Role::Server, 1024);
        to_server.send(Opcode::Binary, b"x").await.unwrap();
        assert!(matches!(from_client.receive().await, Err(ReadError::Protocol(CLOSE_PROTOCOL_ERROR, _))));
        to_client.close(CLOSE_NORMAL, "done").await.unwrap();
        from_server.role = Role::Client;
        let close = from_server.receive().await.unwrap().unwrap();
        assert_eq!(close.close_reason(), Some((CLOSE_NORMAL, "done".to_owned())));
        assert!(from_server.receive().await.unwrap().is_none(), "the connection ended");
    }

    /// A masked frame with first byte `first` (FIN and opcode).
    fn masked_frame(first: u8, payload: &[u8]) -> Vec<u8> {
        let mut frame = vec![first, 0x80 | payload.len() as u8, 1, 2, 3, 4];
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ [1, 2, 3, 4][i % 4]));
        frame
    }
}
