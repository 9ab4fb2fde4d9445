//! [`FakeAgent`]: a landing zone's agent speaking the LZ protocol by hand, for tests that want the
//! server's side of it without starting processes (the agent's own tests start real ones).

use std::pin::Pin;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use mission_api::Resources;
use mission_api::lz::{Hello, Order, Report, Welcome};

/// A stream of text lines.
pub type Lines = Pin<Box<dyn Stream<Item = String> + Send>>;

/// The lines of a streamed answer (NDJSON, or server-sent events), without their line ends.
pub fn lines(response: reqwest::Response) -> Lines {
    let mut buffer = Vec::new();
    Box::pin(response.bytes_stream().flat_map(move |chunk| {
        buffer.extend_from_slice(&chunk.expect("the stream reads"));
        let mut lines = Vec::new();
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            lines.push(String::from_utf8(line).expect("UTF-8 lines").trim_end().to_owned());
        }
        futures_util::stream::iter(lines)
    }))
}

/// An agent connected to a server: its welcome and the stream of its orders.
pub struct FakeAgent {
    /// What the server answered first.
    pub welcome: Welcome,
    url: String,
    token: String,
    http: reqwest::Client,
    orders: Lines,
}

impl FakeAgent {
    /// Connects to the server at `url` with the landing zone's `token`, offering `resources`.
    pub async fn connect(url: &str, token: &str, resources: Resources) -> Self {
        Self::reconnect(url, token, resources, Vec::new()).await
    }

    /// [`FakeAgent::connect`], saying that it still runs the jobs `running`.
    pub async fn reconnect(url: &str, token: &str, resources: Resources, running: Vec<uuid::Uuid>) -> Self {
        let hello = Hello { running, ..Hello::plain(resources, "test") };
        Self::hello(url, token, &hello).await
    }

    /// Connects with `hello`.
    pub async fn hello(url: &str, token: &str, hello: &Hello) -> Self {
        let http = reqwest::Client::new();
        let connected =
            http.post(format!("{url}/api/v1/lz/connect")).bearer_auth(token).json(hello).send().await.expect("connect");
        assert_eq!(connected.status(), 200, "the agent connects");
        let mut orders = lines(connected);
        let welcome = serde_json::from_str(&orders.next().await.expect("a welcome")).expect("a welcome");
        Self { welcome, url: url.to_owned(), token: token.to_owned(), http, orders }
    }

    /// The next order other than a ping (`wait` at most).
    pub async fn next_order_within(&mut self, wait: Duration) -> Option<Order> {
        let next = async {
            loop {
                let line = self.orders.next().await.expect("the order stream stays open");
                match serde_json::from_str::<Order>(&line).expect("an order") {
                    Order::Ping => continue,
                    order => return order,
                }
            }
        };
        tokio::time::timeout(wait, next).await.ok()
    }

    /// The next order other than a ping (10 s at most).
    pub async fn next_order(&mut self) -> Order {
        self.next_order_within(Duration::from_secs(10)).await.expect("an order within 10 s")
    }

    /// Sends `reports`; panics unless the server took them.
    pub async fn report(&self, reports: &[Report]) {
        let sent = self.request("reports").json(reports).send().await.expect("the server answers");
        assert_eq!(sent.status(), 204, "{}", sent.text().await.unwrap_or_default());
    }

    /// Renews the lease; panics unless the server renewed it.
    pub async fn heartbeat(&self) {
        let sent = self.request("heartbeat").send().await.expect("the server answers");
        assert_eq!(sent.status(), 204, "{}", sent.text().await.unwrap_or_default());
    }

    fn request(&self, what: &str) -> reqwest::RequestBuilder {
        self.http.post(format!("{}/api/v1/lz/{what}", self.url)).bearer_auth(&self.token)
    }
}
