//! The event stream (`GET /api/v1/events`): what happens to the caller's missions and jobs, as
//! it happens. An [`EventStream`] reconnects by itself when its connection drops, resuming after
//! the last event it handed out, so a caller sees every event once and in order.

use std::time::Duration;

use futures_util::StreamExt;
use mission_api::Event;

use crate::client::check;
use crate::jobs::ByteStream;
use crate::{Client, Error, Uuid};

/// Which events to watch ([`Client::watch_events`]); `Default` is every event of the caller's,
/// from now on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WatchEvents {
    /// Only these missions' events (any of them).
    pub mission_ids: Vec<Uuid>,
    /// Only these jobs' events (any of them).
    pub job_ids: Vec<Uuid>,
    /// Only these kinds: exact (`job.completed`) or a prefix before a dot (`job`).
    pub kinds: Vec<String>,
    /// Everyone's events (admins only).
    pub all: bool,
    /// Start after this event number instead of now (`Some(0)`: every event still kept).
    pub after: Option<u64>,
}

/// Connection attempts in a row an [`EventStream`] makes before it gives up.
const RECONNECTS: u32 = 30;

/// An open event stream: read it with [`EventStream::next`].
pub struct EventStream {
    client: Client,
    watch: WatchEvents,
    body: Option<ByteStream>,
    buf: Vec<u8>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream").field("watch", &self.watch).finish_non_exhaustive()
    }
}

impl EventStream {
    /// The next event. A dropped connection is opened again, resuming after the last event
    /// returned (giving up with the error after 30 failed attempts in a row, about a minute).
    /// [`Error::EventsMissed`] says events were lost to the server's retention window; the
    /// stream goes on after it.
    pub async fn next(&mut self) -> Result<Event, Error> {
        loop {
            while let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buf.drain(..end + 2).collect();
                let block = Sse::parse(&String::from_utf8_lossy(&block));
                match block.event.as_deref() {
                    Some("gap") => {
                        #[derive(serde::Deserialize)]
                        struct Gap {
                            after: u64,
                            oldest: u64,
                        }
                        let gap: Gap = serde_json::from_str(&block.data)
                            .map_err(|e| Error::Protocol(format!("cannot read a gap event: {e}")))?;
                        return Err(Error::EventsMissed { after: gap.after, oldest: gap.oldest });
                    }
                    _ if block.data.is_empty() => {}
                    _ => {
                        let event: Event = serde_json::from_str(&block.data)
                            .map_err(|e| Error::Protocol(format!("cannot read an event: {e}")))?;
                        self.watch.after = Some(event.seq);
                        return Ok(event);
                    }
                }
            }
            let chunk = match &mut self.body {
                Some(body) => body.next().await,
                None => {
                    self.connect().await?;
                    continue;
                }
            };
            match chunk {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                // The connection dropped: open it again after the last event returned.
                Some(Err(_)) | None => {
                    self.body = None;
                    self.buf.clear();
                }
            }
        }
    }

    /// Opens the stream after the last event returned, trying again while the service cannot be
    /// reached.
    async fn connect(&mut self) -> Result<(), Error> {
        let mut failures = 0;
        loop {
            match self.client.open_events(&self.watch).await {
                Ok(body) => {
                    self.body = Some(body);
                    return Ok(());
                }
                Err(e @ (Error::Http(_) | Error::Api(_))) if e.status().is_none_or(|s| s >= 500) => {
                    failures += 1;
                    if failures >= RECONNECTS {
                        return Err(e);
                    }
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(failures.min(20)))).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// One server-sent event: its `event` type, if any, and its `data` lines joined.
pub(crate) struct Sse {
    pub event: Option<String>,
    pub data: String,
}

impl Sse {
    /// Reads one event's lines (comments and unknown fields ignored).
    pub(crate) fn parse(block: &str) -> Self {
        let mut parsed = Self { event: None, data: String::new() };
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("event:") {
                parsed.event = Some(v.trim().to_owned());
            } else if let Some(v) = line.strip_prefix("data:") {
                if !parsed.data.is_empty() {
                    parsed.data.push('\n');
                }
                parsed.data.push_str(v.strip_prefix(' ').unwrap_or(v));
            }
        }
        parsed
    }
}

impl Client {
    /// Watches events as they happen (see [`mission_api::events`] for their kinds).
    ///
    /// ```no_run
    /// # async fn demo(client: mission_client::Client, job: uuid::Uuid) -> Result<(), mission_client::Error> {
    /// use mission_client::WatchEvents;
    /// let watch = WatchEvents { job_ids: vec![job], kinds: vec!["job".into()], ..Default::default() };
    /// let mut events = client.watch_events(&watch).await?;
    /// loop {
    ///     let event = events.next().await?;
    ///     println!("{} {}", event.seq, event.kind);
    /// }
    /// # }
    /// ```
    pub async fn watch_events(&self, watch: &WatchEvents) -> Result<EventStream, Error> {
        let mut stream = EventStream { client: self.clone(), watch: watch.clone(), body: None, buf: Vec::new() };
        stream.connect().await?;
        Ok(stream)
    }

    async fn open_events(&self, watch: &WatchEvents) -> Result<ByteStream, Error> {
        let mut query: Vec<(&str, String)> = Vec::new();
        query.extend(watch.mission_ids.iter().map(|id| ("mission_ids", id.to_string())));
        query.extend(watch.job_ids.iter().map(|id| ("job_ids", id.to_string())));
        query.extend(watch.kinds.iter().map(|kind| ("kinds", kind.clone())));
        if watch.all {
            query.push(("all", "true".into()));
        }
        if let Some(after) = watch.after {
            query.push(("after", after.to_string()));
        }
        let response = check(self.send("/events", |http, url| http.get(url).query(&query)).await?).await?;
        Ok(Box::pin(response.bytes_stream()))
    }
}
