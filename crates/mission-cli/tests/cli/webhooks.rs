//! Webhooks end to end: a receiver on 127.0.0.1 gets a real job's events, signed; failing
//! receivers are tried again and given up on; the targets rule; the CLI.

use std::time::{Duration, SystemTime};

use mission_client::{CreateWebhook, DeliveryStatus, Error, ListDeliveries, RunJob, Uuid, WebhookDelivery};
use mission_server::WebhookAttempts;
use mission_testkit::{Received, Receiver};

use super::jobs::{Agent, SHELL, TWO_CPUS, cluster, local_station, mission, wait_until};
use super::{Fixture, admin_password};

const SECRET: &str = "a-secret-of-our-own-1234";

fn kinds(received: &[Received]) -> Vec<String> {
    received.iter().map(|r| r.json()["kind"].as_str().unwrap().to_owned()).collect()
}

fn on<'a>(received: &'a [Received], path: &str) -> Vec<&'a Received> {
    received.iter().filter(|r| r.path == path).collect()
}

#[tokio::test]
async fn webhooks_deliver_signed_events_and_try_failures_again() {
    // `/hooks/flaky` fails each delivery twice, `/hooks/down` always.
    let receiver = Receiver::start(|path, earlier| match path {
        "/hooks/flaky" if earlier < 2 => 500,
        "/hooks/down" => 503,
        _ => 204,
    })
    .await;
    let target = format!("{}/hooks/", receiver.url);
    let (server, admin) = cluster(|config| {
        config.webhook_targets = vec![target.parse().unwrap()];
        config.webhook_attempts = WebhookAttempts {
            max_attempts: 3,
            first_retry: Duration::from_millis(50),
            timeout: Duration::from_secs(5),
        };
    })
    .await;
    let _agent = Agent::start(&server, &admin, local_station(), "lz1", TWO_CPUS).await;
    let alice = &server.client;
    server.add_user("bob", false).await;
    let bob = server.sign_in("bob").await;
    let hook = |path: &str| CreateWebhook { url: format!("{}{path}", receiver.url), ..Default::default() };

    // Refused, naming the field, and nothing registered: a URL outside the allowed targets (even
    // one that only starts like it), one with credentials, a short secret, a bad kind, someone
    // else's events.
    let refusals = [
        (CreateWebhook { url: "http://127.0.0.1:9/hooks/x".into(), ..Default::default() }, 400, "--webhook-target"),
        (hook("/hooksmith"), 400, "url"),
        (CreateWebhook { url: target.replace("http://", "http://user:pw@"), ..Default::default() }, 400, "credentials"),
        (CreateWebhook { url: "file:///etc/passwd".into(), ..Default::default() }, 400, "http"),
        (CreateWebhook { secret: Some("short".into()), ..hook("/hooks/ok") }, 400, "secret"),
        (CreateWebhook { kinds: vec!["Job!".into()], ..hook("/hooks/ok") }, 400, "kinds"),
        (CreateWebhook { all: true, ..hook("/hooks/ok") }, 403, "admins"),
    ];
    for (request, status, says) in refusals {
        match alice.create_webhook(&request).await {
            Err(Error::Api(problem) | Error::Forbidden(problem)) => {
                assert_eq!(problem.status, status, "{request:?}: {problem:?}");
                assert!(problem.detail.contains(says), "{request:?}: {problem:?}");
            }
            other => panic!("{request:?} was not refused: {other:?}"),
        }
    }
    assert!(alice.list_webhooks().await.unwrap().is_empty());
    // An admin may send events anywhere.
    let anywhere = CreateWebhook { url: "http://127.0.0.1:9/".into(), ..Default::default() };
    let anywhere = admin.create_webhook(&anywhere).await.unwrap();

    let m = mission(alice, SHELL, &[("run.sh", "echo ran\n")], &[]).await;
    let ok = CreateWebhook {
        secret: Some(SECRET.into()),
        kinds: vec!["job".into()],
        mission_ids: vec![m.mission_id],
        ..hook("/hooks/ok")
    };
    let ok = alice.create_webhook(&ok).await.unwrap();
    assert_eq!(ok.secret, None, "a secret given is not echoed");
    let completed = || vec!["job.completed".to_owned()];
    let flaky = alice.create_webhook(&CreateWebhook { kinds: completed(), ..hook("/hooks/flaky") }).await.unwrap();
    let flaky_secret = flaky.secret.clone().expect("the server made a secret and answered it");
    let down = alice.create_webhook(&CreateWebhook { kinds: completed(), ..hook("/hooks/down") }).await.unwrap();
    // Only missions one may read: bob names alice's (private) one, or one that does not exist.
    for mission_id in [m.mission_id, Uuid::new_v4()] {
        let unreadable = CreateWebhook { mission_ids: vec![mission_id], ..hook("/hooks/bob") };
        match bob.create_webhook(&unreadable).await {
            Err(Error::Api(problem)) => {
                assert_eq!(problem.status, 400, "{problem:?}");
                assert!(problem.detail.contains(&format!("no mission {mission_id} that you may read")), "{problem:?}");
            }
            other => panic!("a webhook on mission {mission_id} was not refused: {other:?}"),
        }
    }
    let bobs = bob.create_webhook(&hook("/hooks/bob")).await.unwrap();
    assert_eq!(alice.list_webhooks().await.unwrap().len(), 3);
    assert_eq!(bob.list_webhooks().await.unwrap(), [mission_client::Webhook { secret: None, ..bobs.clone() }]);
    assert!(matches!(bob.get_webhook(ok.webhook_id).await, Err(Error::NotFound(_))));

    let job = alice.run_job(m.mission_id, &RunJob { station_id: local_station(), ..Default::default() }).await.unwrap();

    // Every transition of the job, signed with the webhook's secret. Deliveries go out side by
    // side, so they may arrive in any order; the events' numbers give theirs.
    let got = receiver.wait_until("the job's six transitions arrive", |r| on(r, "/hooks/ok").len() == 6).await;
    let mut delivered: Vec<Received> = on(&got, "/hooks/ok").into_iter().cloned().collect();
    delivered.sort_by_key(|r| r.json()["seq"].as_u64().unwrap());
    assert_eq!(
        kinds(&delivered),
        ["job.queued", "job.assigned", "job.staging", "job.running", "job.uploading", "job.completed"]
    );
    let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64;
    for request in &delivered {
        assert!(request.signed_with(SECRET), "{request:?}");
        assert!(!request.signed_with(&flaky_secret));
        let event = request.json();
        assert_eq!(event["job_id"], job.job_id.to_string());
        assert_eq!(request.header("mission-event"), event["kind"]);
        assert_eq!(request.header("content-type"), "application/json");
        let timestamp: i64 = request.header("mission-webhook-timestamp").parse().unwrap();
        assert!((now - timestamp).abs() < 60, "a current timestamp");
    }
    let mut ids: Vec<&str> = delivered.iter().map(|r| r.header("mission-webhook-id")).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6, "one delivery per event");
    // A body changed on the way no longer matches its signature.
    let mut forged = delivered[5].clone();
    forged.body = forged.body.iter().copied().map(|b| if b == b'0' { b'1' } else { b }).collect::<Vec<u8>>().into();
    assert!(!forged.signed_with(SECRET));

    // The flaky receiver gets the same delivery three times, and the third is delivered.
    let got = receiver.wait_until("the flaky receiver takes it", |r| on(r, "/hooks/flaky").len() == 3).await;
    let attempts = on(&got, "/hooks/flaky");
    assert_eq!(attempts.iter().map(|r| r.answered).collect::<Vec<_>>(), [500, 500, 204]);
    assert!(attempts.iter().all(|r| r.header("mission-webhook-id") == attempts[0].header("mission-webhook-id")));
    assert!(attempts.iter().all(|r| r.signed_with(&flaky_secret)));
    let one = |deliveries: Vec<WebhookDelivery>| -> WebhookDelivery {
        assert_eq!(deliveries.len(), 1, "{deliveries:#?}");
        deliveries.into_iter().next().unwrap()
    };
    let all = ListDeliveries::default();
    let mut flaky_delivery = one(alice.webhook_deliveries(flaky.webhook_id, &all).await.unwrap());
    for _ in 0..100 {
        if flaky_delivery.status != DeliveryStatus::Pending {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        flaky_delivery = one(alice.webhook_deliveries(flaky.webhook_id, &all).await.unwrap());
    }
    assert_eq!(
        (flaky_delivery.status, flaky_delivery.attempts, flaky_delivery.response_status, flaky_delivery.last_error),
        (DeliveryStatus::Delivered, 3, Some(204), None)
    );
    assert_eq!(flaky_delivery.event_kind, "job.completed");
    assert_eq!(flaky_delivery.delivery_id.to_string(), attempts[0].header("mission-webhook-id"));

    // The receiver that is down is given up on after three attempts, saying why.
    wait_until("the delivery to the receiver that is down fails", || async {
        let failed = ListDeliveries { status: Some(DeliveryStatus::Failed), ..Default::default() };
        alice.webhook_deliveries(down.webhook_id, &failed).await.unwrap().len() == 1
    })
    .await;
    let failed = one(alice.webhook_deliveries(down.webhook_id, &all).await.unwrap());
    assert_eq!((failed.attempts, failed.response_status), (3, Some(503)));
    assert_eq!(failed.last_error.as_deref(), Some("HTTP 503 Service Unavailable"));
    assert!(failed.next_attempt_at.is_none() && failed.finished_at.is_some());
    assert_eq!(on(&receiver.received(), "/hooks/down").len(), 3);
    let pending = ListDeliveries { status: Some(DeliveryStatus::Pending), ..Default::default() };
    assert!(alice.webhook_deliveries(down.webhook_id, &pending).await.unwrap().is_empty());
    let two = ListDeliveries { limit: Some(2), ..Default::default() };
    let page = alice.webhook_deliveries(ok.webhook_id, &two).await.unwrap();
    assert_eq!(page.iter().map(|d| d.event_kind.as_str()).collect::<Vec<_>>(), ["job.completed", "job.uploading"]);
    let before = ListDeliveries { before: Some(page[1].event_seq), limit: Some(1), ..Default::default() };
    assert_eq!(alice.webhook_deliveries(ok.webhook_id, &before).await.unwrap()[0].event_kind, "job.running");

    // Bob's webhook, wanting all of his events, got only its own registration.
    assert_eq!(
        kinds(&on(&receiver.received(), "/hooks/bob").into_iter().cloned().collect::<Vec<_>>()),
        ["webhook.created"]
    );

    // Deleted: nothing more goes to it, and it is gone for its owner.
    assert!(alice.delete_webhook(ok.webhook_id).await.unwrap());
    assert!(!alice.delete_webhook(ok.webhook_id).await.unwrap());
    assert!(matches!(alice.get_webhook(ok.webhook_id).await, Err(Error::NotFound(_))));
    let before = on(&receiver.received(), "/hooks/ok").len();
    let run = RunJob { station_id: local_station(), ..Default::default() };
    let again = alice.run_job(m.mission_id, &run).await.unwrap();
    receiver
        .wait_until("the second job's completion reaches the flaky receiver", |r| {
            r.iter().any(|r| {
                r.path == "/hooks/flaky" && r.json()["job_id"] == again.job_id.to_string() && r.answered == 204
            })
        })
        .await;
    assert_eq!(on(&receiver.received(), "/hooks/ok").len(), before);
    assert!(admin.delete_webhook(anywhere.webhook_id).await.unwrap());
}

#[tokio::test]
async fn webhook_commands() {
    let receiver = Receiver::start(|_, _| 200).await;
    let target = format!("{}/hooks/", receiver.url);
    let fx = Fixture::start_with(&["--webhook-target", &target, "--webhook-attempts", "2"]).await;
    fx.login("admin", "admin", &admin_password(&fx.data_dir)).await;

    // Outside the targets: one line saying which flag allows it; admins may name any URL.
    fx.add_user("carol", "carol-password-1").await;
    fx.login("carol", "carol", "carol-password-1").await;
    let out = fx.run("carol", &["webhooks", "create", "http://127.0.0.1:9/x"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--webhook-target") && stderr.lines().count() == 1, "{stderr}");
    let out = fx.run("admin", &["webhooks", "create", "http://127.0.0.1:9/x"]).await;
    assert!(out.status.success(), "admins may name any URL");
    let outside: serde_json::Value =
        serde_json::from_slice(&fx.run("admin", &["--json", "webhooks", "list"]).await.stdout).unwrap();
    let outside = outside[0]["webhook_id"].as_str().unwrap().to_owned();

    let args = ["--json", "webhooks", "create", &format!("{target}missions"), "--kind", "mission", "--secret-stdin"];
    let out = fx.run_with_stdin("admin", &args, &format!("{SECRET}\n")).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let created: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = created["webhook_id"].as_str().unwrap().to_owned();
    assert_eq!(created["kinds"], serde_json::json!(["mission"]));
    assert!(created.get("secret").is_none());
    // Without --secret-stdin the server's secret is printed, once.
    let made = fx.ok("admin", &["webhooks", "create", &format!("{target}other"), "--kind", "job.failed"]).await;
    assert!(made.contains("created webhook") && made.contains("secret (shown this once"), "{made}");

    fx.ok("admin", &["missions", "create", "--name", "hooked", "--type", "python"]).await;
    let got =
        receiver.wait_until("the mission's creation arrives", |r| r.iter().any(|r| r.path == "/hooks/missions")).await;
    let request = got.iter().find(|r| r.path == "/hooks/missions").unwrap();
    assert!(request.signed_with(SECRET));
    assert_eq!(request.json()["kind"], "mission.created");
    assert_eq!(request.json()["data"]["name"], "hooked");

    let table = fx.ok("admin", &["webhooks", "list"]).await;
    assert!(table.starts_with("ID") && table.contains(&id) && table.contains("/hooks/missions"), "{table}");
    let shown = fx.ok("admin", &["webhooks", "get", &id]).await;
    assert!(shown.contains("events:") && shown.contains("mission"), "{shown}");
    let mut delivered = serde_json::Value::Null;
    for _ in 0..100 {
        delivered = fx.json("admin", &["webhooks", "deliveries", &id, "--status", "delivered"]).await;
        if delivered.as_array().is_some_and(|d| !d.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(delivered[0]["event_kind"], "mission.created");
    assert_eq!(delivered[0]["attempts"], 1);
    let table = fx.ok("admin", &["webhooks", "deliveries", &id]).await;
    assert!(table.starts_with("EVENT") && table.contains("delivered") && table.contains("HTTP 200"), "{table}");

    let bad = fx.run("admin", &["webhooks", "deliveries", &id, "--status", "lost"]).await;
    assert!(!bad.status.success());
    assert!(fx.ok("admin", &["webhooks", "delete", &id]).await.contains("deleted webhook"));
    let gone = fx.run("admin", &["webhooks", "delete", &id]).await;
    assert!(!gone.status.success() && String::from_utf8_lossy(&gone.stderr).contains("no webhook"));
    fx.ok("admin", &["webhooks", "delete", &outside]).await;
    let help = fx.ok("admin", &["webhooks", "--help"]).await;
    assert!(help.contains("Mission-Webhook-Signature"), "{help}");
}
