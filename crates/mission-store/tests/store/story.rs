//! The chapters of the store story. Each starts from a new, migrated database and checks what
//! every operation it calls returns and leaves behind.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use mission_api::{
    CargoBay, CargoBayKind, Job, JobStatus, LandingZone, Mission, PendingKind, PendingReason, ProjectRole,
    QueuePosition, Resources, Station,
};
use mission_store::Store;
use mission_store::{
    CargoBayRecord, ConsoleSessionRecord, DeviceCodeRecord, DeviceCodeStatus, EventFilter, FileRecord, Intent,
    IntentKind, JobFilter, JobUpdate, MissionChanges, MissionFilter, RefreshTokenRecord, StoreError, UploadUsage,
    UserRecord, now,
};
use uuid::Uuid;

/// The `local` station every store starts with.
pub(crate) const LOCAL_STATION: Uuid = Uuid::from_u128(0x6d697373_696f_4e00_8000_000000000002);

fn seconds(n: i64) -> chrono::Duration {
    chrono::Duration::seconds(n)
}

async fn user(store: &Store, name: &str) -> UserRecord {
    let user = UserRecord {
        user_id: Uuid::new_v4(),
        username: name.into(),
        password_hash: Some(format!("hash of {name}")),
        external_sub: None,
        admin: false,
        created_at: now(),
    };
    store.insert_user(&user).await.unwrap();
    user
}

fn mission(owner: Uuid, name: &str, at: DateTime<Utc>) -> Mission {
    Mission {
        mission_id: Uuid::new_v4(),
        name: name.into(),
        description: format!("about {name}"),
        mission_type_id: None,
        source_storage_id: None,
        destination_storage_id: None,
        source_path: None,
        destination_path: None,
        settings: BTreeMap::new(),
        public: false,
        archived: false,
        args: Vec::new(),
        labels: Default::default(),
        retry: None,
        image: None,
        user_id: owner,
        project_id: owner,
        created_at: at,
        updated_at: at,
    }
}

fn page(filter: MissionFilter) -> MissionFilter {
    MissionFilter { page: 1, items: 25, ..filter }
}

async fn names(store: &Store, filter: MissionFilter) -> Vec<String> {
    store.list_missions(&filter).await.unwrap().0.into_iter().map(|m| m.name).collect()
}

fn file(mission: &Mission, path: &str, size: u64) -> FileRecord {
    FileRecord {
        mission_id: mission.mission_id,
        path: path.into(),
        user_id: mission.user_id,
        size,
        sha256: format!("{size:064x}"),
        e_tag: Some(format!("etag-{path}")),
        modified_at: now(),
    }
}

/// Uploads `record` the way the file routes do: intent, reservation, commit.
async fn upload(store: &Store, record: &FileRecord) {
    let intent = Intent::new(IntentKind::Upload, record.mission_id, &record.path);
    store.begin_intent(&intent).await.unwrap();
    store.reserve_upload(intent.intent_id, record.user_id, record.size, |_| Ok::<_, ()>(())).await.unwrap().unwrap();
    store.commit_file(intent.intent_id, record).await.unwrap();
}

pub(crate) fn job(mission: &Mission, station_id: Uuid) -> Job {
    Job {
        memory_amount: 256,
        time_limit: Some(90),
        ..Job::queued(mission.mission_id, mission.user_id, station_id, vec!["sh".into(), "run.sh".into()], now())
    }
}

/// New jobs with the sequence numbers that follow the store's last, as the scheduler gives them.
pub(crate) async fn numbered(store: &Store, jobs: &[Job]) -> Vec<(u64, Job)> {
    let first = store.next_job_seq().await.unwrap();
    (first..).zip(jobs.iter().cloned()).collect()
}

fn landing_zone(station_id: Uuid, name: &str) -> LandingZone {
    LandingZone {
        lz_id: Uuid::new_v4(),
        station_id,
        name: name.into(),
        online: false,
        resources: None,
        in_use: Default::default(),
        last_seen_at: None,
        created_at: now(),
        cluster_account: None,
        pilot_of: None,
        images: false,
    }
}

/// A user with a mission and a landing zone on the `local` station.
pub(crate) async fn mission_with_lz(store: &Store) -> (Mission, Uuid) {
    let ada = user(store, "ada").await;
    let m = mission(ada.user_id, "m", now());
    store.insert_mission(&m).await.unwrap();
    let lz = landing_zone(LOCAL_STATION, "lz");
    store.insert_landing_zone(&lz, "lz-token-hash").await.unwrap();
    (m, lz.lz_id)
}

fn moved(job_id: Uuid, status: JobStatus) -> JobUpdate {
    JobUpdate::new(job_id, status)
}

pub async fn users_and_sign_in(store: &Store) {
    store.ping().await.unwrap();
    assert_eq!(store.count_users().await.unwrap(), 0);
    let ada = user(store, "ada").await;
    let twin = UserRecord { user_id: Uuid::new_v4(), ..ada.clone() };
    assert!(matches!(store.insert_user(&twin).await, Err(StoreError::Conflict(_))), "usernames are unique");
    let external = UserRecord {
        user_id: Uuid::new_v4(),
        username: "auth0|42".into(),
        password_hash: None,
        external_sub: Some("auth0|42".into()),
        admin: true,
        created_at: now(),
    };
    store.insert_user(&external).await.unwrap();
    assert_eq!(store.count_users().await.unwrap(), 2);
    assert_eq!(store.user_by_id(ada.user_id).await.unwrap(), Some(ada.clone()));
    assert_eq!(store.user_by_username("ada").await.unwrap(), Some(ada.clone()));
    assert_eq!(store.user_by_external_sub("auth0|42").await.unwrap().as_ref(), Some(&external));
    assert_eq!(store.user_by_username("nobody").await.unwrap(), None);
    store.update_user_credentials(ada.user_id, "new hash", true).await.unwrap();
    let changed = store.user_by_id(ada.user_id).await.unwrap().unwrap();
    assert_eq!((changed.password_hash.as_deref(), changed.admin), (Some("new hash"), true));
    assert!(store.set_user_admin(ada.user_id, false).await.unwrap());
    assert!(!store.user_by_id(ada.user_id).await.unwrap().unwrap().admin);
    assert!(!store.set_user_admin(Uuid::new_v4(), true).await.unwrap(), "no such user");
    // Users page by username.
    let (first, more) = store.users(1, 1).await.unwrap();
    assert_eq!((first[0].username.as_str(), more), ("ada", true));
    let (second, more) = store.users(2, 1).await.unwrap();
    assert_eq!((second[0].username.as_str(), more), ("auth0|42", false));

    // Device codes: issued, polled, slowed down, decided, consumed once.
    let t0 = now();
    let code = DeviceCodeRecord {
        device_code_hash: "device-hash".into(),
        user_code: "ABCD-EFGH".into(),
        client_id: "mission-cli".into(),
        scope: "openid offline_access".into(),
        status: DeviceCodeStatus::Pending,
        user_id: None,
        interval_secs: 5,
        last_polled_at: None,
        expires_at: t0 + seconds(900),
    };
    store.insert_device_code(&code, t0).await.unwrap();
    let clash = DeviceCodeRecord { device_code_hash: "other-hash".into(), ..code.clone() };
    assert!(matches!(store.insert_device_code(&clash, t0).await, Err(StoreError::Conflict(_))));
    let found = store.device_code_by_user_code("ABCD-EFGH").await.unwrap().unwrap();
    assert_eq!((found.device_code_hash.as_str(), found.status, found.interval_secs), ("device-hash", code.status, 5));
    let before = store.poll_device_code("device-hash", t0 + seconds(5)).await.unwrap().unwrap();
    assert_eq!(before.last_polled_at, None, "a poll answers the record as it was before it");
    let again = store.poll_device_code("device-hash", t0 + seconds(6)).await.unwrap().unwrap();
    assert_eq!(again.last_polled_at, Some(t0 + seconds(5)));
    assert!(store.poll_device_code("no-such-hash", t0).await.unwrap().is_none());
    store.slow_down_device_code("device-hash", 5).await.unwrap();
    assert_eq!(store.device_code_by_user_code("ABCD-EFGH").await.unwrap().unwrap().interval_secs, 10);
    assert!(!store.consume_device_code("device-hash").await.unwrap(), "a pending code is not consumed");
    assert!(store.decide_device_code("ABCD-EFGH", Some(ada.user_id), t0).await.unwrap());
    assert!(!store.decide_device_code("ABCD-EFGH", None, t0).await.unwrap(), "decided once");
    let approved = store.device_code_by_user_code("ABCD-EFGH").await.unwrap().unwrap();
    assert_eq!((approved.status, approved.user_id), (DeviceCodeStatus::Approved, Some(ada.user_id)));
    assert!(store.consume_device_code("device-hash").await.unwrap());
    assert!(!store.consume_device_code("device-hash").await.unwrap(), "tokens are issued once");
    assert_eq!(store.device_code_by_user_code("ABCD-EFGH").await.unwrap().unwrap().status, DeviceCodeStatus::Consumed);
    // An expired code cannot be decided, and a later code's insert sweeps it away.
    let late = DeviceCodeRecord {
        device_code_hash: "late-hash".into(),
        user_code: "LATE-CODE".into(),
        expires_at: t0 + seconds(1),
        ..code.clone()
    };
    store.insert_device_code(&late, t0).await.unwrap();
    assert!(!store.decide_device_code("LATE-CODE", None, t0 + seconds(2)).await.unwrap());
    let next = DeviceCodeRecord { device_code_hash: "next-hash".into(), user_code: "NEXT-CODE".into(), ..code };
    store.insert_device_code(&next, t0 + seconds(120)).await.unwrap();
    assert!(store.device_code_by_user_code("LATE-CODE").await.unwrap().is_none());
    assert!(store.device_code_by_user_code("ABCD-EFGH").await.unwrap().is_some(), "unexpired codes stay");

    // Refresh tokens: kept by hash, revoked once.
    let token = RefreshTokenRecord {
        user_id: ada.user_id,
        client_id: "mission-cli".into(),
        scope: "openid".into(),
        expires_at: t0 + seconds(3600),
        revoked_at: None,
    };
    store.insert_refresh_token("refresh-hash", &token, t0).await.unwrap();
    let stored = store.refresh_token("refresh-hash").await.unwrap().unwrap();
    assert_eq!((stored.user_id, stored.expires_at, stored.revoked_at), (ada.user_id, token.expires_at, None));
    assert!(store.revoke_refresh_token("refresh-hash", t0 + seconds(1)).await.unwrap());
    assert!(!store.revoke_refresh_token("refresh-hash", t0 + seconds(2)).await.unwrap());
    assert_eq!(store.refresh_token("refresh-hash").await.unwrap().unwrap().revoked_at, Some(t0 + seconds(1)));
    assert!(store.refresh_token("unknown").await.unwrap().is_none());

    // Console sessions: found by hash until they expire or end; a new one sweeps the expired.
    let session = |hash: &str, user_id: Uuid, expires_at| ConsoleSessionRecord {
        session_hash: hash.into(),
        user_id,
        csrf_token: format!("csrf-{hash}"),
        created_at: t0,
        expires_at,
    };
    let short = session("short", ada.user_id, t0 + seconds(10));
    store.insert_console_session(&short, t0).await.unwrap();
    assert_eq!(store.console_session("short", t0).await.unwrap(), Some(short.clone()));
    assert!(store.console_session("short", t0 + seconds(10)).await.unwrap().is_none(), "expired");
    let long = session("long", ada.user_id, t0 + seconds(3600));
    store.insert_console_session(&long, t0 + seconds(20)).await.unwrap();
    assert!(store.console_session("short", t0).await.unwrap().is_none(), "swept when the next one came");
    let other = session("other", external.user_id, t0 + seconds(3600));
    store.insert_console_session(&other, t0).await.unwrap();
    assert!(store.delete_console_session("long").await.unwrap());
    assert!(!store.delete_console_session("long").await.unwrap(), "ended once");
    assert!(store.console_session("long", t0).await.unwrap().is_none());
    assert_eq!(store.console_session("other", t0).await.unwrap(), Some(other), "other sessions stay");
}

pub async fn missions_with_every_filter(store: &Store) {
    let ada = user(store, "ada").await;
    let bob = user(store, "bob").await;
    let t0 = now();
    let kind = Uuid::new_v4();
    // Thirty of ada's, oldest first; every third public; bob has one private and one public.
    let mut ada_missions: Vec<Mission> = (0..30)
        .map(|i| Mission {
            public: i % 3 == 0,
            mission_type_id: (i % 2 == 0).then_some(kind),
            ..mission(ada.user_id, &format!("ada-{i:02}"), t0 + seconds(i))
        })
        .collect();
    ada_missions[29].settings = BTreeMap::from([("threads".to_owned(), "4".to_owned())]);
    ada_missions[29].args = vec!["--fast".into(), "ünïcode ✓".into()];
    store.insert_missions(&ada_missions).await.unwrap();
    let bob_private = mission(bob.user_id, "bob-private", t0 + seconds(100));
    let bob_public = Mission { public: true, ..mission(bob.user_id, "bob-public", t0 + seconds(101)) };
    store.insert_mission(&bob_private).await.unwrap();
    store.insert_mission(&bob_public).await.unwrap();

    assert_eq!(store.mission(ada_missions[29].mission_id).await.unwrap().as_ref(), Some(&ada_missions[29]));
    assert!(store.mission(Uuid::new_v4()).await.unwrap().is_none());
    assert!(store.mission_exists(bob_private.mission_id).await.unwrap());
    assert!(!store.mission_exists(Uuid::new_v4()).await.unwrap());

    // An admin's view: everything, newest first, in pages.
    let (first, more) = store.list_missions(&page(MissionFilter::default())).await.unwrap();
    assert_eq!(first.len(), 25);
    assert!(more);
    assert_eq!(
        (first[0].name.as_str(), first[1].name.as_str(), first[2].name.as_str()),
        ("bob-public", "bob-private", "ada-29")
    );
    let (second, more) =
        store.list_missions(&MissionFilter { page: 2, ..page(MissionFilter::default()) }).await.unwrap();
    assert_eq!((second.len(), more), (7, false));
    assert_eq!(second.last().unwrap().name, "ada-00");

    // Bob's view: his own and the public ones, in the same order, paged the same way.
    let bob_view = MissionFilter { visible_to: Some(bob.user_id), items: 4, page: 1, ..Default::default() };
    let (seen, more) = store.list_missions(&bob_view).await.unwrap();
    let seen: Vec<_> = seen.into_iter().map(|m| m.name).collect();
    assert_eq!(seen, ["bob-public", "bob-private", "ada-27", "ada-24"]);
    assert!(more);
    let (rest, more) = store.list_missions(&MissionFilter { page: 3, ..bob_view.clone() }).await.unwrap();
    assert_eq!(rest.into_iter().map(|m| m.name).collect::<Vec<_>>(), ["ada-09", "ada-06", "ada-03", "ada-00"]);
    assert!(!more);
    // Each filter narrows; a viewer's filters keep to what the viewer may see.
    let by_bob = MissionFilter { visible_to: Some(bob.user_id), ..Default::default() };
    assert_eq!(
        names(store, page(MissionFilter { names: vec!["ada-01".into(), "ada-03".into()], ..by_bob.clone() })).await,
        ["ada-03"]
    );
    assert_eq!(
        names(
            store,
            page(MissionFilter {
                mission_ids: vec![ada_missions[1].mission_id, bob_private.mission_id],
                ..by_bob.clone()
            })
        )
        .await,
        ["bob-private"]
    );
    assert_eq!(
        names(store, page(MissionFilter { user_ids: vec![bob.user_id], ..Default::default() })).await,
        ["bob-public", "bob-private"]
    );
    let typed =
        names(store, page(MissionFilter { mission_type_ids: vec![kind], items: 100, ..Default::default() })).await;
    assert_eq!(typed.len(), 15);
    assert!(typed.iter().all(|n| n.trim_start_matches("ada-").parse::<u32>().unwrap() % 2 == 0));
    assert_eq!(
        names(store, page(MissionFilter { archived: Some(true), ..Default::default() })).await,
        Vec::<String>::new()
    );

    // Updates: each field, returned as stored; archived missions filter apart.
    let bay = Uuid::new_v4();
    let changes = MissionChanges {
        name: Some("renamed".into()),
        description: Some("new words".into()),
        source_storage_id: Some(bay),
        destination_storage_id: Some(bay),
        source_path: Some("in/".into()),
        destination_path: Some("out/".into()),
        settings: Some(BTreeMap::from([("k".to_owned(), "v".to_owned())])),
        archived: Some(true),
        args: Some(vec!["a".into(), "b".into()]),
        labels: Some(mission_api::Labels::from([("team/x.y".to_owned(), "say \"hi\"".to_owned())])),
        retry: Some(serde_json::from_str(r#"{"max_attempts": 3, "on": ["lost"], "max_memory": 4096}"#).unwrap()),
        project_id: None,
        image: Some(Some("solver:2.1".into())),
    };
    let later = t0 + seconds(500);
    let updated = store.update_mission(bob_private.mission_id, &changes, later).await.unwrap().unwrap();
    assert_eq!(
        updated,
        Mission {
            name: "renamed".into(),
            description: "new words".into(),
            source_storage_id: Some(bay),
            destination_storage_id: Some(bay),
            source_path: Some("in/".into()),
            destination_path: Some("out/".into()),
            settings: BTreeMap::from([("k".to_owned(), "v".to_owned())]),
            archived: true,
            args: vec!["a".into(), "b".into()],
            labels: changes.labels.clone().unwrap(),
            retry: changes.retry.clone(),
            image: Some("solver:2.1".into()),
            updated_at: later,
            ..bob_private.clone()
        }
    );
    assert_eq!(store.mission(bob_private.mission_id).await.unwrap(), Some(updated));
    assert_eq!(names(store, page(MissionFilter { archived: Some(true), ..Default::default() })).await, ["renamed"]);
    assert_eq!(
        names(store, page(MissionFilter { archived: Some(false), user_ids: vec![bob.user_id], ..Default::default() }))
            .await,
        ["bob-public"]
    );
    // Labels filter every view: the admin's, and a user's (own or public, each arm filtered).
    let labelled = |viewer: Option<Uuid>, pairs: &[(&str, &str)]| {
        page(MissionFilter {
            visible_to: viewer,
            labels: pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
            ..Default::default()
        })
    };
    assert_eq!(names(store, labelled(None, &[("team/x.y", "say \"hi\"")])).await, ["renamed"]);
    assert_eq!(names(store, labelled(Some(bob.user_id), &[("team/x.y", "say \"hi\"")])).await, ["renamed"]);
    assert_eq!(names(store, labelled(Some(ada.user_id), &[("team/x.y", "say \"hi\"")])).await, Vec::<String>::new());
    assert_eq!(names(store, labelled(None, &[("team/x.y", "say")])).await, Vec::<String>::new());
    assert_eq!(names(store, labelled(None, &[("team/x.y", "say \"hi\""), ("other", "")])).await, Vec::<String>::new());

    let untouched =
        store.update_mission(bob_public.mission_id, &MissionChanges::default(), later).await.unwrap().unwrap();
    assert_eq!(untouched, Mission { updated_at: later, ..bob_public.clone() });
    assert!(store.update_mission(Uuid::new_v4(), &changes, later).await.unwrap().is_none());

    assert!(store.delete_mission(bob_public.mission_id).await.unwrap());
    assert!(!store.delete_mission(bob_public.mission_id).await.unwrap());
    assert!(store.mission(bob_public.mission_id).await.unwrap().is_none());
}

pub async fn files_intents_and_usage(store: &Store) {
    let ada = user(store, "ada").await;
    let m = mission(ada.user_id, "files", now());
    let other = mission(ada.user_id, "other", now());
    store.insert_missions(&[m.clone(), other.clone()]).await.unwrap();
    assert_eq!(store.mission_file_activity(m.mission_id).await.unwrap(), 0);

    // An upload: the intent shows while in flight, and reserves its room.
    let data = file(&m, "data/ünï.csv", 1000);
    let intent = Intent::new(IntentKind::Upload, m.mission_id, &data.path);
    store.begin_intent(&intent).await.unwrap();
    let pending = store.pending_intents().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].intent_id, pending[0].kind, pending[0].path.as_str()),
        (intent.intent_id, IntentKind::Upload, data.path.as_str())
    );
    assert_eq!(store.mission_file_activity(m.mission_id).await.unwrap(), 1);
    let mut seen = None;
    store
        .reserve_upload(intent.intent_id, ada.user_id, 1000, |usage| {
            seen = Some(usage);
            Ok::<_, ()>(())
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen, Some(UploadUsage { existing_size: None, mission_files: 0, user_bytes: 0 }));
    // A second upload in flight sees the first's reservation; refused, it reserves nothing.
    let second = Intent::new(IntentKind::Upload, other.mission_id, "b.bin");
    store.begin_intent(&second).await.unwrap();
    let refusal = store
        .reserve_upload(second.intent_id, ada.user_id, 50, |usage| {
            assert_eq!(usage, UploadUsage { existing_size: None, mission_files: 0, user_bytes: 1000 });
            Err("over quota")
        })
        .await
        .unwrap();
    assert_eq!(refusal, Err("over quota"));
    store.drop_intent(second.intent_id).await.unwrap();

    store.commit_file(intent.intent_id, &data).await.unwrap();
    assert!(store.pending_intents().await.unwrap().is_empty(), "a commit ends its intent");
    assert_eq!(store.mission_file(m.mission_id, &data.path).await.unwrap(), Some(data.clone()));
    assert_eq!(
        store.upload_usage(m.mission_id, ada.user_id, &data.path).await.unwrap(),
        UploadUsage { existing_size: Some(1000), mission_files: 1, user_bytes: 1000 }
    );
    // Replacing a file changes the byte total by the difference, not the file count.
    let replaced = file(&m, &data.path, 400);
    upload(store, &replaced).await;
    upload(store, &file(&m, "readme.md", 10)).await;
    upload(store, &file(&other, "x", 5)).await;
    assert_eq!(
        store.upload_usage(m.mission_id, ada.user_id, "new.txt").await.unwrap(),
        UploadUsage { existing_size: None, mission_files: 2, user_bytes: 415 }
    );
    let listed: Vec<_> =
        store.mission_files(m.mission_id).await.unwrap().into_iter().map(|f| (f.path, f.size)).collect();
    assert_eq!(listed, [("data/ünï.csv".to_owned(), 400), ("readme.md".to_owned(), 10)], "by path");
    assert_eq!(store.mission_file_activity(m.mission_id).await.unwrap(), 2);

    // A path cannot be a file and a folder at once, whichever comes first.
    assert_eq!(store.path_conflict(m.mission_id, "data").await.unwrap().as_deref(), Some("data/ünï.csv"));
    assert_eq!(store.path_conflict(m.mission_id, "readme.md/inner").await.unwrap().as_deref(), Some("readme.md"));
    assert_eq!(
        store.path_conflict(m.mission_id, "data/ünï.csv/deeper/x").await.unwrap().as_deref(),
        Some("data/ünï.csv")
    );
    assert_eq!(store.path_conflict(m.mission_id, "data/other.csv").await.unwrap(), None);
    assert_eq!(store.path_conflict(m.mission_id, "dat").await.unwrap(), None);
    assert_eq!(store.path_conflict(other.mission_id, "data").await.unwrap(), None, "per mission");

    // Deletes: the row goes, and the totals follow.
    assert!(store.delete_file_row(m.mission_id, "readme.md").await.unwrap());
    assert!(!store.delete_file_row(m.mission_id, "readme.md").await.unwrap());
    assert_eq!(
        store.upload_usage(m.mission_id, ada.user_id, "readme.md").await.unwrap(),
        UploadUsage { existing_size: None, mission_files: 1, user_bytes: 405 }
    );
    let delete = Intent::new(IntentKind::Delete, m.mission_id, &data.path);
    store.begin_intent(&delete).await.unwrap();
    assert_eq!(store.pending_intents().await.unwrap()[0].kind, IntentKind::Delete);
    store.drop_intent(delete.intent_id).await.unwrap();
    // Deleting a mission deletes its files and their usage.
    assert!(store.delete_mission(m.mission_id).await.unwrap());
    assert!(store.mission_files(m.mission_id).await.unwrap().is_empty());
    assert_eq!(store.upload_usage(other.mission_id, ada.user_id, "y").await.unwrap().user_bytes, 5);
    assert_eq!(store.mission_file_activity(m.mission_id).await.unwrap(), 0);
}

pub async fn parallel_uploads_share_one_quota(store: &Store) {
    let ada = user(store, "ada").await;
    let m = mission(ada.user_id, "quota", now());
    store.insert_mission(&m).await.unwrap();
    // Ten uploads of 100 bytes race for room for five: exactly five get it.
    let attempts = (0..10).map(|i| {
        let store = store.clone();
        let path = format!("f{i}");
        async move {
            let intent = Intent::new(IntentKind::Upload, m.mission_id, &path);
            store.begin_intent(&intent).await.unwrap();
            store
                .reserve_upload(intent.intent_id, ada.user_id, 100, |usage| {
                    if usage.user_bytes + 100 <= 500 { Ok(()) } else { Err(()) }
                })
                .await
                .unwrap()
                .is_ok()
        }
    });
    let admitted = futures_util::future::join_all(attempts).await.into_iter().filter(|ok| *ok).count();
    assert_eq!(admitted, 5);
}

pub async fn cargo_bays(store: &Store) {
    let ada = user(store, "ada").await;
    let bob = user(store, "bob").await;
    let t0 = now();
    let s3 = CargoBayRecord {
        bay: CargoBay {
            storage_id: Uuid::new_v4(),
            name: "lab bucket".into(),
            kind: CargoBayKind::S3,
            user_id: Some(ada.user_id),
            bucket: Some("lab".into()),
            prefix: Some("runs".into()),
            endpoint: Some("http://127.0.0.1:9000".into()),
            region: Some("eu-west-1".into()),
            path: None,
            has_credentials: true,
            created_at: Some(t0),
        },
        sealed_credentials: Some(vec![0, 1, 2, 255, 254]),
    };
    let local = CargoBayRecord {
        bay: CargoBay {
            storage_id: Uuid::new_v4(),
            name: "scratch".into(),
            kind: CargoBayKind::Local,
            user_id: Some(bob.user_id),
            bucket: None,
            prefix: None,
            endpoint: None,
            region: None,
            path: Some("/srv/scratch".into()),
            has_credentials: false,
            created_at: Some(t0 + seconds(1)),
        },
        sealed_credentials: None,
    };
    store.insert_cargo_bay(&s3).await.unwrap();
    store.insert_cargo_bay(&local).await.unwrap();
    assert_eq!(store.cargo_bay(s3.bay.storage_id).await.unwrap(), Some(s3.clone()));
    assert!(store.cargo_bay(Uuid::new_v4()).await.unwrap().is_none());
    assert_eq!(store.cargo_bays(Some(bob.user_id)).await.unwrap(), std::slice::from_ref(&local));
    assert_eq!(store.cargo_bays(None).await.unwrap(), [s3.clone(), local.clone()], "oldest first");

    // A bay a mission names cannot go.
    let m = Mission { destination_storage_id: Some(s3.bay.storage_id), ..mission(ada.user_id, "m", t0) };
    store.insert_mission(&m).await.unwrap();
    assert!(matches!(store.delete_cargo_bay(s3.bay.storage_id).await, Err(StoreError::Conflict(_))));
    assert!(store.cargo_bay(s3.bay.storage_id).await.unwrap().is_some());
    store.delete_mission(m.mission_id).await.unwrap();
    assert!(store.delete_cargo_bay(s3.bay.storage_id).await.unwrap());
    assert!(!store.delete_cargo_bay(s3.bay.storage_id).await.unwrap());
    assert_eq!(store.cargo_bays(None).await.unwrap(), [local]);
}

pub async fn stations_members_and_landing_zones(store: &Store) {
    let ada = user(store, "ada").await;
    let bob = user(store, "bob").await;
    let t0 = now();
    let local = store.station(LOCAL_STATION).await.unwrap().expect("every store starts with the local station");
    assert!(local.open && local.owner_id.is_none());
    let lab = Station {
        station_id: Uuid::new_v4(),
        name: "lab".into(),
        description: "the lab's hosts".into(),
        owner_id: Some(ada.user_id),
        open: false,
        reclaim: true,
        container_network: Default::default(),
        energy: Default::default(),
        grid_intensity_problem: None,
        created_at: t0,
    };
    store.insert_station(&lab).await.unwrap();
    let twin = Station { station_id: Uuid::new_v4(), ..lab.clone() };
    assert!(matches!(store.insert_station(&twin).await, Err(StoreError::Conflict(_))));
    // An update changes what it names and keeps the rest.
    let changes = mission_api::UpdateStation {
        description: Some("racks 1-4".into()),
        reclaim: Some(false),
        container_network: Some(mission_api::ContainerNetwork::None),
        ..Default::default()
    };
    assert!(store.update_station(lab.station_id, &changes).await.unwrap());
    let changed = store.station(lab.station_id).await.unwrap().unwrap();
    assert_eq!(
        (changed.description.as_str(), changed.open, changed.reclaim, changed.container_network),
        ("racks 1-4", false, false, mission_api::ContainerNetwork::None)
    );
    // Energy settings: kept whole as given, and the defaults again when given the defaults.
    let green = mission_api::StationEnergy {
        pue: 1.1,
        grid_gco2e_per_kwh: 20.0,
        prices: Some(mission_api::PriceBook {
            currency: "CHF".into(),
            cpu_hour: 0.01,
            gpu_hour: 2.0,
            gb_hour: 0.0,
            kwh: 0.3,
        }),
        ..Default::default()
    };
    let energy = mission_api::UpdateStation { energy: Some(green.clone()), ..Default::default() };
    assert!(store.update_station(lab.station_id, &energy).await.unwrap());
    let changed = store.station(lab.station_id).await.unwrap().unwrap();
    assert_eq!((changed.energy, changed.reclaim), (green.clone(), false), "the rest kept");
    // A grid intensity file's readings: a good value becomes the intensity, a problem is kept
    // beside the last good one; a file the station no longer reads changes nothing.
    let file = "/var/lib/grid/intensity";
    let with_file = mission_api::StationEnergy { grid_intensity_file: Some(file.into()), ..green.clone() };
    let energy = mission_api::UpdateStation { energy: Some(with_file.clone()), ..Default::default() };
    assert!(store.update_station(lab.station_id, &energy).await.unwrap());
    assert!(store.set_grid_intensity(lab.station_id, file, Some(123.5), None).await.unwrap());
    let read = store.station(lab.station_id).await.unwrap().unwrap();
    assert_eq!((read.energy.grid_gco2e_per_kwh, read.grid_intensity_problem), (123.5, None));
    assert_eq!(read.energy.pue, 1.1, "the rest of the settings kept");
    assert!(store.set_grid_intensity(lab.station_id, file, None, Some("missing")).await.unwrap());
    let read = store.station(lab.station_id).await.unwrap().unwrap();
    assert_eq!((read.energy.grid_gco2e_per_kwh, read.grid_intensity_problem.as_deref()), (123.5, Some("missing")));
    assert!(!store.set_grid_intensity(lab.station_id, "/elsewhere", Some(1.0), None).await.unwrap());
    // New settings start without a problem.
    assert!(store.update_station(lab.station_id, &energy).await.unwrap());
    assert_eq!(store.station(lab.station_id).await.unwrap().unwrap().grid_intensity_problem, None);
    let defaults = mission_api::UpdateStation { energy: Some(Default::default()), ..Default::default() };
    assert!(store.update_station(lab.station_id, &defaults).await.unwrap());
    let back = mission_api::UpdateStation {
        description: Some(lab.description.clone()),
        reclaim: Some(true),
        container_network: Some(mission_api::ContainerNetwork::Host),
        ..Default::default()
    };
    assert!(store.update_station(lab.station_id, &back).await.unwrap());
    let opened = mission_api::UpdateStation { open: Some(true), ..Default::default() };
    assert!(!store.update_station(Uuid::new_v4(), &opened).await.unwrap());
    assert_eq!(store.station(lab.station_id).await.unwrap(), Some(lab.clone()));
    let names = |stations: Vec<Station>| stations.into_iter().map(|s| s.name).collect::<Vec<_>>();
    assert_eq!(names(store.stations(None).await.unwrap()), ["lab", "local"]);
    assert_eq!(names(store.stations(Some(ada.user_id)).await.unwrap()), ["lab", "local"], "owned and open");
    assert_eq!(names(store.stations(Some(bob.user_id)).await.unwrap()), ["local"]);

    store.add_station_member(lab.station_id, bob.user_id, t0).await.unwrap();
    store.add_station_member(lab.station_id, bob.user_id, t0 + seconds(1)).await.unwrap();
    store.add_station_member(lab.station_id, ada.user_id, t0).await.unwrap();
    assert!(store.is_station_member(lab.station_id, bob.user_id).await.unwrap());
    assert_eq!(names(store.stations(Some(bob.user_id)).await.unwrap()), ["lab", "local"], "member of");
    let members = store.station_members(lab.station_id).await.unwrap();
    assert_eq!(
        members.iter().map(|m| (m.username.as_str(), m.added_at)).collect::<Vec<_>>(),
        [("ada", t0), ("bob", t0)]
    );
    assert!(store.remove_station_member(lab.station_id, bob.user_id).await.unwrap());
    assert!(!store.remove_station_member(lab.station_id, bob.user_id).await.unwrap());
    assert!(!store.is_station_member(lab.station_id, bob.user_id).await.unwrap());

    let gpu = landing_zone(lab.station_id, "gpu-1");
    let cpu = landing_zone(lab.station_id, "cpu-1");
    store.insert_landing_zone(&gpu, "gpu-token").await.unwrap();
    store.insert_landing_zone(&cpu, "cpu-token").await.unwrap();
    let twin = landing_zone(lab.station_id, "gpu-1");
    assert!(matches!(store.insert_landing_zone(&twin, "other-token").await, Err(StoreError::Conflict(_))));
    store.insert_landing_zone(&landing_zone(LOCAL_STATION, "gpu-1"), "local-token").await.unwrap();
    // Online while its agent was heard from within the lease.
    let lease = Duration::from_secs(30);
    let resources = Resources { cpu_count: 16, memory_amount: 64 << 30, gpu_count: 2 };
    store.lz_connected(gpu.lz_id, resources, true, t0).await.unwrap();
    let zones = store.landing_zones(Some(lab.station_id), lease, t0 + seconds(10)).await.unwrap();
    assert_eq!(
        zones.iter().map(|z| (z.name.as_str(), z.online, z.resources, z.images)).collect::<Vec<_>>(),
        [("cpu-1", false, None, false), ("gpu-1", true, Some(resources), true)]
    );
    assert!(!store.landing_zones(Some(lab.station_id), lease, t0 + seconds(31)).await.unwrap()[1].online);
    store.lz_seen(gpu.lz_id, t0 + seconds(30)).await.unwrap();
    assert!(store.landing_zones(Some(lab.station_id), lease, t0 + seconds(31)).await.unwrap()[1].online);
    assert_eq!(store.landing_zones(None, lease, t0).await.unwrap().len(), 3);
    let identity = store.lz_by_token_hash("gpu-token").await.unwrap().unwrap();
    assert_eq!((identity.lz_id, identity.station_id, identity.name.as_str()), (gpu.lz_id, lab.station_id, "gpu-1"));
    assert!(store.lz_by_token_hash("nope").await.unwrap().is_none());

    // Rotating a token keeps the LZ's id; naming a new LZ registers it.
    let rotated = store.rotate_lz_token(lab.station_id, "gpu-1", "gpu-token-2", t0).await.unwrap();
    assert_eq!(rotated, gpu.lz_id);
    assert!(store.lz_by_token_hash("gpu-token").await.unwrap().is_none());
    assert_eq!(store.lz_by_token_hash("gpu-token-2").await.unwrap().unwrap().lz_id, gpu.lz_id);
    let fresh = store.rotate_lz_token(lab.station_id, "new-lz", "new-token", t0).await.unwrap();
    assert_eq!(store.lz_by_token_hash("new-token").await.unwrap().unwrap().lz_id, fresh);

    assert!(store.delete_landing_zone(lab.station_id, cpu.lz_id).await.unwrap());
    assert!(!store.delete_landing_zone(LOCAL_STATION, gpu.lz_id).await.unwrap(), "only its own station's");
    assert!(store.delete_station(lab.station_id).await.unwrap());
    assert!(!store.delete_station(lab.station_id).await.unwrap());
    assert!(store.lz_by_token_hash("gpu-token-2").await.unwrap().is_none(), "a station's LZs go with it");
    assert!(store.station_members(lab.station_id).await.unwrap().is_empty());
}

pub async fn job_batches_and_history(store: &Store) {
    let (m, lz) = mission_with_lz(store).await;
    let first = job(&m, LOCAL_STATION);
    let second = Job { job_id: Uuid::new_v4(), ..first.clone() };

    // A job submitted and placed in one batch, beside one only submitted.
    let assigned = JobUpdate {
        lz_id: Some(Some(lz)),
        gpu_indices: Some(vec![0, 1]),
        detail: Some("on lz".into()),
        ..moved(first.job_id, JobStatus::Assigned)
    };
    store.save_jobs(&numbered(store, &[first.clone(), second.clone()]).await, &[assigned], &[]).await.unwrap();
    let stored = store.job(first.job_id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.lz_id, stored.gpu_indices.clone()), (JobStatus::Assigned, Some(lz), vec![0, 1]));
    assert_eq!(stored.history.len(), 2);
    assert_eq!(stored.history[1].detail.as_deref(), Some("on lz"));
    let stored_second = store.job(second.job_id).await.unwrap().unwrap();
    assert_eq!(stored_second.command, first.command);
    assert_eq!(stored_second.history, second.history);
    let (listed, total) = store.jobs(&JobFilter { items: 10, page: 1, ..Default::default() }).await.unwrap();
    assert_eq!(total, 2);
    assert_eq!(listed[0].job_id, second.job_id, "newest first: submission order is kept");
    assert!(listed[0].history.is_empty(), "listings leave history out");
    // What the placed job holds counts against its landing zone; the queued one counts nowhere.
    let in_use = |zones: Vec<LandingZone>| zones.into_iter().find(|z| z.lz_id == lz).unwrap().in_use;
    let lease = std::time::Duration::from_secs(30);
    let held = in_use(store.landing_zones(Some(LOCAL_STATION), lease, first.created_at).await.unwrap());
    assert_eq!(
        held,
        Resources { cpu_count: first.cpu_count, memory_amount: first.memory_amount, gpu_count: first.gpu_count }
    );

    // Several moves of a stored job in one batch: the row ends in the last state, every move is
    // in the history, in order.
    let limits = JobUpdate { limits: Some("enforced".into()), ..moved(first.job_id, JobStatus::Running) };
    let done =
        JobUpdate { exit_code: Some(-9), reason: Some("killed".into()), ..moved(first.job_id, JobStatus::Completed) };
    let staging = moved(first.job_id, JobStatus::Staging);
    store.save_jobs(&[], &[staging, limits, done.clone()], &[]).await.unwrap();
    let stored = store.job(first.job_id).await.unwrap().unwrap();
    let statuses: Vec<_> = stored.history.iter().map(|t| t.status).collect();
    assert_eq!(
        statuses,
        [JobStatus::Queued, JobStatus::Assigned, JobStatus::Staging, JobStatus::Running, JobStatus::Completed]
    );
    assert_eq!(stored.status, JobStatus::Completed);
    assert_eq!(
        (stored.exit_code, stored.reason.as_deref(), stored.limits.as_deref()),
        (Some(-9), Some("killed"), Some("enforced"))
    );
    assert_eq!(stored.lz_id, Some(lz), "fields a move leaves out keep their value");
    assert!(stored.started_at.is_some());
    assert_eq!(stored.finished_at, Some(done.at));
    assert_eq!(store.job_history(first.job_id).await.unwrap(), stored.history);
    let held = in_use(store.landing_zones(None, lease, first.created_at).await.unwrap());
    assert_eq!(held, Resources::default(), "an ended job holds nothing");
    let row = store.job_row(first.job_id).await.unwrap().unwrap();
    assert_eq!(row, Job { history: Vec::new(), ..stored });

    // A re-queue clears the placement and the start.
    let placed = JobUpdate { lz_id: Some(Some(lz)), ..moved(second.job_id, JobStatus::Assigned) };
    let running = moved(second.job_id, JobStatus::Running);
    let requeued = JobUpdate { lz_id: Some(None), ..moved(second.job_id, JobStatus::Queued) };
    store.save_jobs(&[], &[placed, running, requeued], &[]).await.unwrap();
    let stored = store.job(second.job_id).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.lz_id, stored.started_at), (JobStatus::Queued, None, None));
    assert_eq!(stored.history.len(), 4);
    let mut ran = Vec::new();
    store.queued_jobs(|row| ran.push((row.job_id, row.ran))).await.unwrap();
    assert!(ran.contains(&(second.job_id, true)), "it ran before, and its next run's output goes on after: {ran:?}");
    // Moves across batches keep numbering the history.
    store.save_jobs(&[], &[moved(second.job_id, JobStatus::Stopped)], &[]).await.unwrap();
    assert_eq!(store.job(second.job_id).await.unwrap().unwrap().history.len(), 5);
    assert!(store.job(Uuid::new_v4()).await.unwrap().is_none());
    store.save_jobs(&[], &[], &[]).await.unwrap();

    // What jobs wait for, and why: dependencies round-trip; a pending reason is kept while a
    // job is queued, a move out of the queue clears the reason unless it gives one (a batch
    // system's), a reason for a job no longer queued is dropped, and `None` clears one. Positions
    // count the queued jobs ahead on the station and of the same user there.
    let waits = |kind, detail: &str| Some(PendingReason { kind, detail: detail.into() });
    let ahead = Job { after_ok: vec![first.job_id], after_any: vec![second.job_id], ..job(&m, LOCAL_STATION) };
    let behind = Job { pending_reason: waits(PendingKind::Priority, "first in line"), ..job(&m, LOCAL_STATION) };
    let placed = job(&m, LOCAL_STATION);
    store.save_jobs(&numbered(store, &[ahead.clone(), behind.clone(), placed.clone()]).await, &[], &[]).await.unwrap();
    let positions = store.queue_positions(&[ahead.job_id, behind.job_id, placed.job_id]).await.unwrap();
    assert_eq!(positions[&behind.job_id], QueuePosition { station: 2, own: 2 });
    let assigned = JobUpdate { lz_id: Some(Some(lz)), ..moved(placed.job_id, JobStatus::Assigned) };
    let resources = waits(PendingKind::Resources, "room on lz");
    let reasons = [(ahead.job_id, resources.clone()), (placed.job_id, resources.clone())];
    store.save_jobs(&[], &[assigned], &reasons).await.unwrap();
    let stored = store.job_row(ahead.job_id).await.unwrap().unwrap();
    assert_eq!((stored.after_ok, stored.after_any), (vec![first.job_id], vec![second.job_id]));
    assert_eq!(stored.pending_reason, resources);
    assert_eq!(store.job_row(behind.job_id).await.unwrap().unwrap().pending_reason, behind.pending_reason);
    assert_eq!(store.job_row(placed.job_id).await.unwrap().unwrap().pending_reason, None, "placed in the same batch");
    let slurm = waits(PendingKind::BatchSystem, "waiting in Slurm's queue: Priority");
    let staging = JobUpdate { pending: slurm.clone(), ..moved(placed.job_id, JobStatus::Staging) };
    let assigned = moved(ahead.job_id, JobStatus::Assigned);
    store.save_jobs(&[], &[staging, assigned], &[(behind.job_id, None)]).await.unwrap();
    assert_eq!(store.job_row(placed.job_id).await.unwrap().unwrap().pending_reason, slurm);
    assert_eq!(store.job_row(ahead.job_id).await.unwrap().unwrap().pending_reason, None);
    assert_eq!(store.job_row(behind.job_id).await.unwrap().unwrap().pending_reason, None, "cleared");
    let positions = store.queue_positions(&[ahead.job_id, behind.job_id]).await.unwrap();
    assert_eq!(positions.len(), 1, "only queued jobs have a position");
    assert_eq!(positions[&behind.job_id], QueuePosition { station: 1, own: 1 }, "the one ahead left the queue");
    let owners = store.job_owners_and_statuses(&[ahead.job_id, Uuid::new_v4(), first.job_id]).await.unwrap();
    assert_eq!(owners.len(), 2);
    assert!(owners.contains(&(first.job_id, m.user_id, JobStatus::Completed)));
}

/// Jobs outlive the hosts they ran on and their mission: deleting a landing zone keeps the ended
/// jobs that asked for it or ran on it (their history and usage included; the landing zone they
/// name becomes none), and deleting a station or a mission keeps its jobs, which go on naming it.
pub async fn jobs_outlive_their_hosts_and_mission(store: &Store) {
    let (m, _) = mission_with_lz(store).await;
    let lab = Station {
        station_id: Uuid::new_v4(),
        name: "short-lived".into(),
        description: String::new(),
        owner_id: None,
        open: true,
        reclaim: false,
        container_network: Default::default(),
        energy: Default::default(),
        grid_intensity_problem: None,
        created_at: now(),
    };
    store.insert_station(&lab).await.unwrap();
    let lz = landing_zone(lab.station_id, "gone-soon");
    store.insert_landing_zone(&lz, "gone-soon-token-hash").await.unwrap();
    let asked = Job { requested_lz_id: Some(lz.lz_id), ..job(&m, lab.station_id) };
    let placed = JobUpdate { lz_id: Some(Some(lz.lz_id)), ..moved(asked.job_id, JobStatus::Assigned) };
    let usage = mission_api::JobUsage { wall_time: 30.0, cpu_time: Some(20.0), ..Default::default() };
    let ended = JobUpdate { usage: Some(usage), ..moved(asked.job_id, JobStatus::Completed) };
    store.save_jobs(&numbered(store, std::slice::from_ref(&asked)).await, &[placed], &[]).await.unwrap();
    store.save_jobs(&[], &[moved(asked.job_id, JobStatus::Running), ended], &[]).await.unwrap();
    let before = store.job(asked.job_id).await.unwrap().unwrap();
    let usage = store.usage_summary(m.user_id, &[], None).await.unwrap();
    assert_eq!(usage.jobs, 1);

    assert!(store.delete_landing_zone(lab.station_id, lz.lz_id).await.unwrap());
    let kept = store.job(asked.job_id).await.unwrap().expect("the job outlives its landing zone");
    assert_eq!((kept.requested_lz_id, kept.lz_id), (None, None));
    assert_eq!(kept.history, before.history);
    assert_eq!(store.usage_summary(m.user_id, &[], None).await.unwrap(), usage);

    assert!(store.delete_station(lab.station_id).await.unwrap());
    let kept = store.job(asked.job_id).await.unwrap().expect("the job outlives its station");
    assert_eq!((kept.station_id, kept.status, kept.history.len()), (lab.station_id, JobStatus::Completed, 4));
    assert_eq!(store.usage_summary(m.user_id, &[], None).await.unwrap(), usage);

    assert!(store.delete_mission(m.mission_id).await.unwrap());
    let kept = store.job(asked.job_id).await.unwrap().expect("the job outlives its mission");
    assert_eq!((kept.mission_id, kept.history.len()), (m.mission_id, 4));
    assert_eq!(store.usage_summary(m.user_id, &[], None).await.unwrap(), usage, "its usage still counts");
}

/// Image archives count against their owner's bytes, with their files: an image that would take
/// them over the room given is not added; a registry image holds none of them.
pub async fn images_count_against_their_owners_bytes(store: &Store) {
    let (m, _) = mission_with_lz(store).await;
    let owner = m.user_id;
    let image = |name: &str, size: u64, reference: Option<&str>| mission_api::Image {
        image_id: Uuid::new_v4(),
        name: name.into(),
        digest: format!("sha256:{}", "ab".repeat(32)),
        size,
        format: if reference.is_some() { mission_api::ImageFormat::Registry } else { mission_api::ImageFormat::Oci },
        reference: reference.map(str::to_owned),
        visibility: mission_api::ImageVisibility::Private,
        owner_id: owner,
        project_id: owner,
        created_at: now(),
    };
    assert_eq!(store.insert_image(&image("a", 100, None), 150).await.unwrap(), Ok(()));
    assert_eq!(store.insert_image(&image("b", 100, None), 150).await.unwrap(), Err(100), "over the room");
    let reference = image("c", 0, Some("registry.example/c@sha256:ab"));
    assert_eq!(store.insert_image(&reference, u64::MAX).await.unwrap(), Ok(()));
    assert!(matches!(store.insert_image(&image("a", 1, None), u64::MAX).await, Err(StoreError::Conflict(_))));
    assert_eq!(store.owner_bytes(owner).await.unwrap(), 100);
    upload(store, &file(&m, "data.bin", 20)).await;
    assert_eq!(store.owner_bytes(owner).await.unwrap(), 120);
    assert_eq!(store.upload_usage(m.mission_id, owner, "other.bin").await.unwrap().user_bytes, 120);
    assert_eq!(store.images_named(Some("b"), None).await.unwrap().len(), 0, "the refused image is not there");
}

/// An array's progress follows every write of its elements, in batches of any mix: new elements,
/// moves (several of one element in a batch), moves that keep the status, and deletion.
pub async fn array_progress_follows_every_write(store: &Store) {
    let (m, lz) = mission_with_lz(store).await;
    let array_id = Uuid::new_v4();
    let element = |index| Job { array_id: Some(array_id), array_index: Some(index), ..job(&m, LOCAL_STATION) };
    let elements: Vec<Job> = (1..=4).map(element).collect();
    let lone = job(&m, LOCAL_STATION);
    let mut batch = elements.clone();
    batch.push(lone.clone());
    store.save_jobs(&numbered(store, &batch).await, &[], &[]).await.unwrap();
    let progress = || async { store.job_array(array_id, None).await.unwrap().unwrap() };
    let counts = |a: mission_api::JobArray| (a.size, a.queued, a.running, a.completed, a.failed, a.stopped);
    let first = progress().await;
    assert_eq!((first.array_id, first.mission_id, counts(first)), (array_id, m.mission_id, (4, 4, 0, 0, 0, 0)));

    let placed = |job: &Job| JobUpdate { lz_id: Some(Some(lz)), ..moved(job.job_id, JobStatus::Assigned) };
    let moves = [
        placed(&elements[0]),
        moved(elements[0].job_id, JobStatus::Running),
        moved(elements[0].job_id, JobStatus::Completed),
        placed(&elements[1]),
        moved(elements[1].job_id, JobStatus::Running),
        placed(&elements[2]),
        moved(elements[2].job_id, JobStatus::Failed),
        placed(&lone),
    ];
    let reason = mission_api::PendingReason { kind: PendingKind::Resources, detail: "waits".into() };
    store.save_jobs(&[], &moves, &[(elements[3].job_id, Some(reason))]).await.unwrap();
    assert_eq!(counts(progress().await), (4, 1, 1, 1, 1, 0));
    // A move to the status a job has already changes no count.
    store.save_jobs(&[], &[moved(elements[1].job_id, JobStatus::Running)], &[]).await.unwrap();
    assert_eq!(counts(progress().await), (4, 1, 1, 1, 1, 0));
    store.save_jobs(&[], &[moved(elements[3].job_id, JobStatus::Stopped)], &[]).await.unwrap();
    assert_eq!(counts(progress().await), (4, 0, 1, 1, 1, 1));

    assert!(store.job_array(array_id, Some(m.user_id)).await.unwrap().is_some());
    assert!(store.job_array(array_id, Some(Uuid::new_v4())).await.unwrap().is_none(), "someone else's array");
    assert!(store.job_array(Uuid::new_v4(), None).await.unwrap().is_none());
    // Deleting the mission keeps its jobs, and with them the array's progress.
    assert!(store.delete_mission(m.mission_id).await.unwrap());
    assert_eq!(counts(progress().await), (4, 0, 1, 1, 1, 1));
}

pub async fn a_failing_batch_leaves_nothing_written(store: &Store) {
    let (m, _) = mission_with_lz(store).await;
    let job = job(&m, LOCAL_STATION);
    let other = Job { job_id: Uuid::new_v4(), ..job.clone() };
    // The third insert repeats the first's id: the whole batch is refused.
    let err = store.save_jobs(&numbered(store, &[job.clone(), other.clone(), job.clone()]).await, &[], &[]).await;
    assert!(err.is_err());
    assert!(store.job(job.job_id).await.unwrap().is_none());
    assert!(store.job(other.job_id).await.unwrap().is_none());
    // And the store is usable afterwards.
    store
        .save_jobs(&numbered(store, std::slice::from_ref(&job)).await, &[moved(job.job_id, JobStatus::Stopped)], &[])
        .await
        .unwrap();
    assert_eq!(store.job(job.job_id).await.unwrap().unwrap().status, JobStatus::Stopped);
}

pub async fn job_listings_results_and_agents(store: &Store) {
    let (m, lz) = mission_with_lz(store).await;
    let bob = user(store, "bob").await;
    let bobs = mission(bob.user_id, "bobs", now());
    store.insert_mission(&bobs).await.unwrap();
    let lab = Station {
        station_id: Uuid::new_v4(),
        name: "lab".into(),
        description: String::new(),
        owner_id: None,
        open: true,
        reclaim: true,
        container_network: Default::default(),
        energy: Default::default(),
        grid_intensity_problem: None,
        created_at: now(),
    };
    store.insert_station(&lab).await.unwrap();
    let mut jobs: Vec<Job> = (0..6)
        .map(|i| match i % 3 {
            0 => job(&m, LOCAL_STATION),
            1 => job(&m, lab.station_id),
            _ => job(&bobs, LOCAL_STATION),
        })
        .collect();
    // A key with '.' and '/' is one key, not a path into the object.
    let label = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
    jobs[0].labels = label(&[("sweep", "a"), ("team/x.y", "say \"hi\"")]);
    jobs[3].labels = label(&[("sweep", "a")]);
    jobs[4].labels = label(&[("sweep", "b")]);
    jobs[1].log_cap = Some(4096);
    // What only placement reads of a queued job: the LZ it names, its retry policy, what it waits for.
    jobs[3].requested_lz_id = Some(lz);
    jobs[5].retry = Some(mission_api::RetryPolicy {
        max_attempts: 3,
        on: vec![mission_api::RetryOn::Lost],
        backoff: 5,
        memory_factor: 2.0,
        max_memory: Some(4096),
    });
    jobs[5].after_ok = vec![jobs[2].job_id];
    jobs[5].after_any = vec![jobs[3].job_id, jobs[4].job_id];
    // A TES task's disk, which placement reads from its document.
    let task = mission_api::tes::JobTask { task: Default::default(), images: Vec::new(), disk_mb: 1234 };
    jobs[4].task = Some(Box::new(task));
    store.save_jobs(&numbered(store, &jobs).await, &[], &[]).await.unwrap();
    // A log cap asked for is kept; a job whose output passed it is found among others.
    assert_eq!(store.job_row(jobs[1].job_id).await.unwrap().unwrap().log_cap, Some(4096));
    store.mark_log_truncated(jobs[1].job_id).await.unwrap();
    assert!(store.job_row(jobs[1].job_id).await.unwrap().unwrap().log_truncated);
    let placed = JobUpdate { lz_id: Some(Some(lz)), ..moved(jobs[0].job_id, JobStatus::Running) };
    // jobs[1] (1 CPU, 256 MB asked for) used half its CPU over 2 hours and 100 MB at its peak.
    let used = mission_api::JobUsage {
        wall_time: 7200.0,
        cpu_time: Some(3600.0),
        cpu_efficiency: None,
        peak_memory: Some(100),
        energy_kwh: Some(0.025),
        co2e_g: Some(11.875),
        cost: Some(mission_api::Cost { amount: 0.04, currency: "EUR".into() }),
        energy_parts: Some(mission_api::EnergyParts {
            cpu: Some(mission_api::EnergyPart { wh: 10.0, source: mission_api::EnergySource::Rapl }),
            memory: Some(mission_api::EnergyPart { wh: 0.5, source: mission_api::EnergySource::Model }),
            gpu: Some(mission_api::EnergyPart { wh: 0.0, source: mission_api::EnergySource::Model }),
        }),
    };
    let failed =
        JobUpdate { usage: Some(used.clone()), lz_id: Some(Some(lz)), ..moved(jobs[1].job_id, JobStatus::Failed) };
    store.save_jobs(&[], &[placed, failed], &[]).await.unwrap();
    // The ends an agent reports find, in one read, what they need of the jobs on its own LZ.
    let ending = |job_id: Uuid, log_truncated: bool| mission_store::EndingJob {
        job_id,
        mission_id: m.mission_id,
        log_truncated,
        nodes: 1,
        destination_storage_id: None,
    };
    let reported = [jobs[3].job_id, jobs[1].job_id, jobs[0].job_id];
    assert_eq!(
        store.ending_jobs(&reported, lz).await.unwrap(),
        [ending(jobs[0].job_id, false), ending(jobs[1].job_id, true)],
        "only placed jobs, in submission order, the truncated log told"
    );
    assert_eq!(store.ending_jobs(&reported, Uuid::new_v4()).await.unwrap(), [], "another LZ's jobs");
    assert_eq!(store.ending_jobs(&[], lz).await.unwrap(), []);
    let got = store.job_row(jobs[1].job_id).await.unwrap().unwrap();
    assert_eq!(got.usage, Some(mission_api::JobUsage { cpu_efficiency: Some(0.5), ..used }));
    assert_eq!(store.job_row(jobs[0].job_id).await.unwrap().unwrap().usage, None);
    let summary = store.usage_summary(m.user_id, &[], None).await.unwrap();
    let expected = mission_api::UsageSummary {
        jobs: 1,
        wall_hours: 2.0,
        cpu_hours: 1.0,
        cpu_hours_held: 2.0,
        mean_cpu_efficiency: Some(0.5),
        over_requested_memory: 1,
        energy_kwh: 0.025,
        co2e_g: 11.875,
    };
    assert_eq!(summary, expected);
    assert_eq!(
        store.usage_summary(m.user_id, &[m.mission_id], Some(got.finished_at.unwrap())).await.unwrap(),
        expected
    );
    let later = got.finished_at.unwrap() + chrono::Duration::seconds(1);
    assert_eq!(store.usage_summary(m.user_id, &[], Some(later)).await.unwrap().jobs, 0);
    assert_eq!(store.usage_summary(bob.user_id, &[], None).await.unwrap().jobs, 0);
    // Per user: its cost per currency, and with a start, its use per day.
    let by_user = mission_store::UsageGrouping::User;
    let all_jobs = mission_store::UsageScope::All;
    let groups = store.usage_by(&by_user, &all_jobs, None, None).await.unwrap();
    assert_eq!(groups.len(), 1, "{groups:?}");
    assert_eq!(groups[0].cost, [mission_api::Cost { amount: 0.04, currency: "EUR".into() }]);
    assert!(groups[0].daily.is_empty(), "days only with a start");
    let day_before = got.finished_at.unwrap() - chrono::Duration::days(1);
    let groups = store.usage_by(&by_user, &all_jobs, Some(day_before), None).await.unwrap();
    let daily = &groups[0].daily;
    assert_eq!(daily.iter().map(|d| (d.day, d.jobs)).collect::<Vec<_>>(), [(got.finished_at.unwrap().date_naive(), 1)]);
    assert_eq!((daily[0].cpu_hours_held, daily[0].energy_kwh, daily[0].co2e_g), (2.0, 0.025, 11.875));
    // What fair-share order starts from: CPUs plus GPUs times wall time of the jobs that ended.
    let hour = std::time::Duration::from_secs(3600);
    let used = store.used_since(hour, hour / 60).await.unwrap();
    assert_eq!(used.len(), 1, "{used:?}");
    assert_eq!((used[0].project_id, used[0].user_id, used[0].used), (got.project_id, m.user_id, 7200.0));
    assert!((0.0..60.0).contains(&used[0].seconds_ago), "{used:?}");

    let ids = |listed: Vec<Job>| listed.into_iter().map(|j| j.job_id).collect::<Vec<_>>();
    let all = JobFilter { items: 10, page: 1, ..Default::default() };
    let (listed, total) = store.jobs(&all).await.unwrap();
    assert_eq!(total, 6);
    assert_eq!(ids(listed), jobs.iter().rev().map(|j| j.job_id).collect::<Vec<_>>());
    let (listed, total) = store.jobs(&JobFilter { items: 2, page: 2, ..all.clone() }).await.unwrap();
    assert_eq!((ids(listed), total), (vec![jobs[3].job_id, jobs[2].job_id], 6), "a page, with the total");
    let (listed, total) = store.jobs(&JobFilter { user: Some(bob.user_id), ..all.clone() }).await.unwrap();
    assert_eq!((ids(listed), total), (vec![jobs[5].job_id, jobs[2].job_id], 2));
    let (listed, _) = store.jobs(&JobFilter { station_ids: vec![lab.station_id], ..all.clone() }).await.unwrap();
    assert_eq!(ids(listed), [jobs[4].job_id, jobs[1].job_id]);
    let (listed, _) = store.jobs(&JobFilter { mission_ids: vec![bobs.mission_id], ..all.clone() }).await.unwrap();
    assert_eq!(ids(listed), [jobs[5].job_id, jobs[2].job_id]);
    let (listed, _) =
        store.jobs(&JobFilter { statuses: vec![JobStatus::Running, JobStatus::Failed], ..all.clone() }).await.unwrap();
    assert_eq!(ids(listed), [jobs[1].job_id, jobs[0].job_id]);
    let by_labels = |pairs: &[(&str, &str)]| JobFilter {
        labels: pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect(),
        ..all.clone()
    };
    let (listed, total) = store.jobs(&by_labels(&[("sweep", "a")])).await.unwrap();
    assert_eq!((ids(listed), total), (vec![jobs[3].job_id, jobs[0].job_id], 2));
    let (listed, _) = store.jobs(&by_labels(&[("sweep", "a"), ("team/x.y", "say \"hi\"")])).await.unwrap();
    assert_eq!(ids(listed), [jobs[0].job_id], "every label given");
    let (listed, _) = store.jobs(&by_labels(&[("team", "say \"hi\"")])).await.unwrap();
    assert_eq!(ids(listed), Vec::<Uuid>::new());
    assert_eq!(store.job_row(jobs[0].job_id).await.unwrap().unwrap().labels, jobs[0].labels);
    assert!(store.set_job_labels(jobs[4].job_id, &label(&[("sweep", "a")])).await.unwrap());
    assert!(!store.set_job_labels(Uuid::new_v4(), &label(&[])).await.unwrap(), "no such job");
    let (listed, _) = store.jobs(&by_labels(&[("sweep", "a")])).await.unwrap();
    assert_eq!(ids(listed), [jobs[4].job_id, jobs[3].job_id, jobs[0].job_id], "labels changed");

    // What a scheduler rebuilds from: the placed jobs whole, the queued ones streamed as
    // placement needs them, both in submission order.
    let placed = store.placed_jobs().await.unwrap();
    assert_eq!(placed.iter().map(|(_, j)| j.job_id).collect::<Vec<_>>(), [jobs[0].job_id]);
    let mut queued = Vec::new();
    store.queued_jobs(|row| queued.push(row)).await.unwrap();
    assert_eq!(
        queued.iter().map(|row| row.job_id).collect::<Vec<_>>(),
        [jobs[2].job_id, jobs[3].job_id, jobs[4].job_id, jobs[5].job_id],
        "in submission order"
    );
    assert!(queued.windows(2).all(|w| w[0].seq < w[1].seq) && placed[0].0 < queued[0].seq);
    for (row, job) in queued.iter().zip(&jobs[2..]) {
        assert_eq!((row.user_id, row.station_id), (job.user_id, job.station_id));
        assert_eq!((row.cpu_count, row.memory_amount, row.gpu_count, row.attempt), (1, job.memory_amount, 0, 1));
        assert_eq!(row.requested_lz_id, job.requested_lz_id);
        assert_eq!((&row.after_ok, &row.after_any), (&job.after_ok, &job.after_any));
        assert_eq!(row.retry, job.retry);
        assert_eq!(row.disk_mb, if job.task.is_some() { 1234 } else { 0 });
    }
    assert_eq!(store.mission_unfinished_jobs(m.mission_id).await.unwrap(), 3);
    assert_eq!(store.mission_unfinished_jobs(bobs.mission_id).await.unwrap(), 2);

    // Results: recorded, replaced, listed by path, one by path.
    let out = FileRecord { mission_id: Uuid::nil(), ..file(&m, "out/b.txt", 3) };
    store.insert_job_result(jobs[0].job_id, &out).await.unwrap();
    store.insert_job_result(jobs[0].job_id, &file(&m, "a.txt", 1)).await.unwrap();
    let bigger = file(&m, "out/b.txt", 30);
    store.insert_job_result(jobs[0].job_id, &bigger).await.unwrap();
    let results = store.job_results(&jobs[0]).await.unwrap();
    assert_eq!(
        results.iter().map(|f| (f.path.as_str(), f.size)).collect::<Vec<_>>(),
        [("a.txt", 1), ("out/b.txt", 30)]
    );
    assert!(results.iter().all(|f| f.mission_id == m.mission_id && f.user_id == m.user_id));
    assert_eq!(store.job_result(&jobs[0], "out/b.txt").await.unwrap(), Some(bigger));
    assert_eq!(store.job_result(&jobs[0], "missing").await.unwrap(), None);
    assert!(store.job_results(&jobs[1]).await.unwrap().is_empty());

    // A mission's deletion takes its jobs' results along; the jobs stay, for accounting.
    let listed = store.jobs(&all).await.unwrap().1;
    assert!(store.delete_mission(m.mission_id).await.unwrap());
    assert!(store.job(jobs[0].job_id).await.unwrap().is_some());
    assert!(store.job_results(&jobs[0]).await.unwrap().is_empty());
    assert_eq!(store.jobs(&all).await.unwrap().1, listed);
}

pub async fn the_event_log_in_commit_order(store: &Store) {
    let ada = user(store, "ada").await;
    let t0 = now();
    assert_eq!(store.event_bounds().await.unwrap(), (0, 0), "a new store has no events");

    // Writers at once: each event is kept once, numbered without holes in commit order.
    let mut writers = tokio::task::JoinSet::new();
    for i in 0..20 {
        let (store, m) = (store.clone(), mission(ada.user_id, &format!("m{i:02}"), t0));
        writers.spawn(async move { store.insert_mission(&m).await.map(|()| m.mission_id) });
    }
    let mut created: Vec<Uuid> = writers.join_all().await.into_iter().map(Result::unwrap).collect();
    let renamed = MissionChanges { name: Some("renamed".into()), ..Default::default() };
    store.update_mission(created[0], &renamed, t0).await.unwrap().unwrap();
    assert!(store.delete_mission(created[1]).await.unwrap());
    assert!(!store.delete_mission(created[1]).await.unwrap(), "no event for what did not happen");

    let all = EventFilter { limit: 100, ..Default::default() };
    let events = store.events(&all).await.unwrap();
    let numbers: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(numbers, (1..=22).collect::<Vec<u64>>());
    let mut told: Vec<Uuid> = events[..20].iter().map(|e| e.mission_id.unwrap()).collect();
    told.sort();
    created.sort();
    assert_eq!(told, created);
    assert!(events[..20].iter().all(|e| e.kind == "mission.created" && e.user_id == ada.user_id));
    assert_eq!((events[20].kind.as_str(), events[20].data["name"].as_str()), ("mission.updated", Some("renamed")));
    assert_eq!(events[21].kind, "mission.deleted");
    assert_eq!(store.event_bounds().await.unwrap(), (1, 22));

    // Reading from a number, for one mission, for one user, a page at a time.
    let later = store.events(&EventFilter { after: 20, ..all.clone() }).await.unwrap();
    assert_eq!(later, events[20..]);
    let one = EventFilter { mission_ids: vec![events[20].mission_id.unwrap()], ..all.clone() };
    assert_eq!(store.events(&one).await.unwrap().len(), 2);
    assert!(store.events(&EventFilter { user_id: Some(Uuid::new_v4()), ..all.clone() }).await.unwrap().is_empty());
    assert_eq!(store.events(&EventFilter { limit: 5, ..all.clone() }).await.unwrap(), events[..5]);

    // Past the retention window they go; the numbers go on from where they were.
    assert_eq!(store.prune_events(t0 - chrono::Duration::seconds(60)).await.unwrap(), 0);
    assert_eq!(store.prune_events(now() + chrono::Duration::seconds(60)).await.unwrap(), 22);
    assert_eq!(store.event_bounds().await.unwrap(), (0, 0));
    store.insert_mission(&mission(ada.user_id, "after", t0)).await.unwrap();
    assert_eq!(store.events(&all).await.unwrap()[0].seq, 23);
}

fn webhook(owner: Uuid, kinds: &[&str]) -> mission_api::Webhook {
    mission_api::Webhook {
        webhook_id: Uuid::new_v4(),
        user_id: owner,
        url: "http://127.0.0.1:9/hook".into(),
        mission_ids: Vec::new(),
        kinds: kinds.iter().map(|k| (*k).to_owned()).collect(),
        all: false,
        created_at: now(),
        secret: None,
    }
}

pub async fn webhooks_route_claim_and_deliver(store: &Store) {
    use mission_api::DeliveryStatus::{Delivered, Failed, Pending};
    use mission_store::{AttemptOutcome, NewDelivery};
    let ada = user(store, "ada").await;
    store.insert_mission(&mission(ada.user_id, "before", now())).await.unwrap();
    assert_eq!(store.webhook_cursor().await.unwrap(), 0, "the cursor starts where the log was");

    // A webhook begins at its own event, which tells of it without its secret.
    let hook = webhook(ada.user_id, &["job"]);
    let record = store.insert_webhook(&hook, b"sealed", 2).await.unwrap();
    let all = EventFilter { limit: 100, ..Default::default() };
    let created = store.events(&all).await.unwrap().pop().unwrap();
    assert_eq!((created.kind.as_str(), record.since_seq), ("webhook.created", created.seq));
    assert_eq!(created.data["webhook_id"], hook.webhook_id.to_string());
    assert!(!created.data.to_string().contains("sealed"));
    assert_eq!(store.webhook(hook.webhook_id).await.unwrap(), Some(record.clone()));
    let other = webhook(ada.user_id, &[]);
    store.insert_webhook(&other, b"sealed too", 2).await.unwrap();
    match store.insert_webhook(&webhook(ada.user_id, &[]), b"x", 2).await {
        Err(StoreError::Conflict(why)) => assert!(why.contains("you have 2 webhooks"), "{why}"),
        other => panic!("a third webhook past the limit of 2: {other:?}"),
    }
    assert_eq!(store.webhooks(Some(ada.user_id)).await.unwrap().len(), 2);
    assert!(store.webhooks(Some(Uuid::new_v4())).await.unwrap().is_empty());

    // Routing is idempotent and moves the cursor forward only; a deleted webhook gets nothing.
    let delivery = |webhook_id, seq| NewDelivery {
        webhook_id,
        event_seq: seq,
        event_kind: "job.queued".into(),
        body: format!("{{\"seq\":{seq}}}"),
    };
    let t0 = now();
    let routed = [delivery(hook.webhook_id, 10), delivery(hook.webhook_id, 11), delivery(Uuid::new_v4(), 11)];
    store.add_deliveries(&routed, 11, t0).await.unwrap();
    store.add_deliveries(&routed[..1], 10, t0).await.unwrap();
    assert_eq!(store.webhook_cursor().await.unwrap(), 11);
    let listed = store.deliveries(hook.webhook_id, None, None, 10).await.unwrap();
    assert_eq!(
        listed.iter().map(|d| (d.event_seq, d.status, d.attempts)).collect::<Vec<_>>(),
        [(11, Pending, 0), (10, Pending, 0)]
    );
    assert_eq!(store.next_delivery_due().await.unwrap().map(|t| t.timestamp_micros()), Some(t0.timestamp_micros()));

    // Claims: two senders at once never take the same delivery; a claim holds it until it ends.
    let until = t0 + seconds(30);
    let (a, b) = tokio::join!(store.claim_deliveries(t0, until, 1), store.claim_deliveries(t0, until, 5));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.len() + b.len(), 2);
    let mut claimed: Vec<_> = a.into_iter().chain(b).collect();
    claimed.sort_by_key(|d| d.body.clone());
    assert_ne!(claimed[0].delivery_id, claimed[1].delivery_id);
    assert_eq!(
        (claimed[0].url.as_str(), claimed[0].sealed_secret.as_slice()),
        ("http://127.0.0.1:9/hook", &b"sealed"[..])
    );
    assert_eq!((claimed[0].body.as_str(), claimed[0].attempts), ("{\"seq\":10}", 0));
    assert!(store.claim_deliveries(t0, until, 5).await.unwrap().is_empty());
    assert_eq!(store.next_delivery_due().await.unwrap().map(|t| t.timestamp_micros()), Some(until.timestamp_micros()));
    // A claim that ran out (its sender stopped) is taken again.
    assert_eq!(store.claim_deliveries(until, until + seconds(30), 5).await.unwrap().len(), 2);

    // Attempts end delivered, failed, or pending until their next one.
    let failed_once = AttemptOutcome {
        status: Pending,
        response_status: Some(500),
        error: Some("HTTP 500".into()),
        next_attempt_at: Some(t0 + seconds(5)),
    };
    store.finish_delivery_attempt(claimed[0].delivery_id, &failed_once, t0).await.unwrap();
    let delivered =
        AttemptOutcome { status: Delivered, response_status: Some(204), error: None, next_attempt_at: None };
    store.finish_delivery_attempt(claimed[1].delivery_id, &delivered, t0).await.unwrap();
    assert!(store.claim_deliveries(t0 + seconds(4), t0 + seconds(60), 5).await.unwrap().is_empty(), "not due yet");
    let again = store.claim_deliveries(t0 + seconds(5), t0 + seconds(60), 5).await.unwrap();
    assert_eq!((again.len(), again[0].attempts), (1, 1));
    let gave_up =
        AttemptOutcome { status: Failed, response_status: None, error: Some("refused".into()), next_attempt_at: None };
    store.finish_delivery_attempt(again[0].delivery_id, &gave_up, t0).await.unwrap();
    assert_eq!(store.next_delivery_due().await.unwrap(), None);
    let listed = store.deliveries(hook.webhook_id, None, None, 10).await.unwrap();
    let shown: Vec<_> = listed
        .iter()
        .map(|d| (d.event_seq, d.status, d.attempts, d.response_status, d.last_error.as_deref()))
        .collect();
    assert_eq!(shown, [(11, Delivered, 1, Some(204), None), (10, Failed, 2, None, Some("refused"))]);
    assert!(listed.iter().all(|d| d.finished_at.is_some() && d.next_attempt_at.is_none()));
    assert_eq!(store.deliveries(hook.webhook_id, Some(Failed), None, 10).await.unwrap().len(), 1);
    assert_eq!(store.deliveries(hook.webhook_id, None, Some(11), 10).await.unwrap()[0].event_seq, 10);
    assert_eq!(store.deliveries(hook.webhook_id, None, None, 1).await.unwrap()[0].event_seq, 11);

    // Deleting a webhook tells of it and takes its deliveries along; old deliveries are pruned
    // with the events.
    store.add_deliveries(&[delivery(other.webhook_id, 12)], 12, t0).await.unwrap();
    assert!(store.delete_webhook(hook.webhook_id).await.unwrap());
    assert!(!store.delete_webhook(hook.webhook_id).await.unwrap());
    assert_eq!(store.events(&all).await.unwrap().pop().unwrap().kind, "webhook.deleted");
    assert!(store.deliveries(hook.webhook_id, None, None, 10).await.unwrap().is_empty());
    assert_eq!(store.deliveries(other.webhook_id, None, None, 10).await.unwrap().len(), 1);
    store.prune_events(t0 + seconds(1)).await.unwrap();
    assert!(store.deliveries(other.webhook_id, None, None, 10).await.unwrap().is_empty());
}

pub async fn projects_and_members(store: &Store) {
    let ada = user(store, "ada").await;
    let bob = user(store, "bob").await;
    let t0 = now();
    // Every user comes with a personal project: the user's id, `~name`, the user its manager.
    let personal = store.project(ada.user_id, ada.user_id).await.unwrap().expect("ada's personal project");
    assert_eq!(
        (personal.name.as_str(), personal.personal, personal.role, personal.members),
        ("~ada", Some(ada.user_id), Some(ProjectRole::Manager), 1)
    );
    assert_eq!(store.project_role(ada.user_id, bob.user_id).await.unwrap(), None);
    assert!(!store.delete_project(ada.user_id).await.unwrap(), "a personal project goes only with its user");

    let bio = Uuid::new_v4();
    store.insert_project(bio, "bio", "the biology department", t0).await.unwrap();
    assert!(matches!(store.insert_project(Uuid::new_v4(), "bio", "", t0).await, Err(StoreError::Conflict(_))));
    let seen = store.project(bio, bob.user_id).await.unwrap().unwrap();
    assert_eq!((seen.name.as_str(), seen.personal, seen.role, seen.members), ("bio", None, None, 0));
    assert_eq!((seen.created_at, seen.updated_at), (t0, t0));

    store.set_project_member(bio, bob.user_id, ProjectRole::Viewer, t0).await.unwrap();
    store.set_project_member(bio, ada.user_id, ProjectRole::Member, t0).await.unwrap();
    store.set_project_member(bio, bob.user_id, ProjectRole::Manager, t0 + seconds(1)).await.unwrap();
    assert_eq!(store.project_role(bio, bob.user_id).await.unwrap(), Some(ProjectRole::Manager), "the role changes");
    let members = store.project_members(bio).await.unwrap();
    assert_eq!(
        members.iter().map(|m| (m.username.as_str(), m.role, m.added_at)).collect::<Vec<_>>(),
        [("ada", ProjectRole::Member, t0), ("bob", ProjectRole::Manager, t0 + seconds(1))]
    );

    // A user lists the projects they are a member of; `all` lists every one, by name, in pages.
    let names = |page: (Vec<mission_api::Project>, bool)| {
        (page.0.into_iter().map(|p| (p.name, p.role)).collect::<Vec<_>>(), page.1)
    };
    assert_eq!(
        names(store.projects(bob.user_id, false, 1, 25).await.unwrap()),
        (vec![("bio".to_owned(), Some(ProjectRole::Manager)), ("~bob".to_owned(), Some(ProjectRole::Manager))], false)
    );
    assert!(names(store.projects(bob.user_id, true, 1, 2).await.unwrap()).1, "three projects, two a page");
    assert_eq!(
        names(store.projects(bob.user_id, true, 2, 2).await.unwrap()),
        (vec![("~bob".to_owned(), Some(ProjectRole::Manager))], false)
    );

    assert!(store.update_project(bio, Some("biology"), None, t0 + seconds(2)).await.unwrap());
    assert!(matches!(store.update_project(bio, Some("~ada"), None, t0).await, Err(StoreError::Conflict(_))));
    let renamed = store.project(bio, ada.user_id).await.unwrap().unwrap();
    assert_eq!((renamed.name.as_str(), renamed.description.as_str()), ("biology", "the biology department"));
    assert_eq!(renamed.updated_at, t0 + seconds(2));
    assert!(!store.update_project(Uuid::new_v4(), None, Some("x"), t0).await.unwrap());

    // Missions and jobs name their project; a project that holds missions stays.
    let mut experiment = mission(ada.user_id, "experiment", t0);
    experiment.project_id = bio;
    store.insert_mission(&experiment).await.unwrap();
    assert_eq!(store.mission(experiment.mission_id).await.unwrap().unwrap().project_id, bio);
    let job = Job { project_id: bio, ..Job::queued(experiment.mission_id, ada.user_id, LOCAL_STATION, vec![], t0) };
    store.save_jobs(&numbered(store, std::slice::from_ref(&job)).await, &[], &[]).await.unwrap();
    assert_eq!(store.job(job.job_id).await.unwrap().unwrap().project_id, bio);
    assert_eq!(store.project_holdings(bio).await.unwrap(), (1, 1));
    assert!(!store.delete_project(bio).await.unwrap(), "it holds a mission");
    let moved = MissionChanges { project_id: Some(ada.user_id), ..Default::default() };
    let moved = store.update_mission(experiment.mission_id, &moved, t0).await.unwrap().unwrap();
    assert_eq!(moved.project_id, ada.user_id);
    assert_eq!(store.project_holdings(bio).await.unwrap(), (0, 1), "its job stays charged to it");

    // Memberships a group claim gives follow it; one set by hand stays, whatever it says.
    let claimed = |names: &[(&str, ProjectRole)]| names.iter().map(|(n, r)| ((*n).to_owned(), *r)).collect::<Vec<_>>();
    let role_of = |user: Uuid| async move { store.project_role(bio, user).await.unwrap() };
    store.sync_claimed_memberships(bob.user_id, &claimed(&[("biology", ProjectRole::Viewer)]), t0).await.unwrap();
    assert_eq!(role_of(bob.user_id).await, Some(ProjectRole::Manager), "set by hand, kept");
    let cy = user(store, "cy").await;
    let both =
        claimed(&[("biology", ProjectRole::Member), ("~ada", ProjectRole::Member), ("none", ProjectRole::Member)]);
    store.sync_claimed_memberships(cy.user_id, &both, t0).await.unwrap();
    assert_eq!(role_of(cy.user_id).await, Some(ProjectRole::Member));
    assert_eq!(store.project_role(ada.user_id, cy.user_id).await.unwrap(), None, "never a personal project");
    store.sync_claimed_memberships(cy.user_id, &[], t0).await.unwrap();
    assert_eq!(role_of(cy.user_id).await, None, "the claim no longer names it");

    assert!(store.remove_project_member(bio, ada.user_id).await.unwrap());
    assert!(!store.remove_project_member(bio, ada.user_id).await.unwrap());
    assert!(store.delete_project(bio).await.unwrap());
    assert!(store.project(bio, ada.user_id).await.unwrap().is_none());
    assert!(store.project_members(bio).await.unwrap().is_empty(), "its members went with it");
}

/// The audit trail: entries noted in a scope are written with the change that commits, not with
/// one that fails; read back newest first, filtered; pruned by age.
pub async fn the_audit_trail(store: &Store) {
    use mission_store::audit::{self, Actor, AuditFilter, Change};
    let ada = user(store, "ada").await;
    let actor = Actor { user_id: ada.user_id, admin: true };
    let project = Uuid::new_v4();
    let made = audit::scope("req-1".into(), async {
        audit::note(actor, Change::new("project.create", "project", project).named("bio").in_project(project));
        store.insert_project(project, "bio", "", now()).await
    })
    .await;
    made.unwrap();
    // A change that fails takes its entry with it.
    let again = audit::scope("req-2".into(), async {
        audit::note(actor, Change::new("project.create", "project", Uuid::new_v4()).named("bio"));
        store.insert_project(Uuid::new_v4(), "bio", "", now()).await
    })
    .await;
    assert!(matches!(again, Err(StoreError::Conflict(_))));
    // Outside a scope nothing is noted; notes handed to another task are written there.
    audit::note(actor, Change::new("project.update", "project", project));
    let carried = audit::scope("req-3".into(), async {
        audit::note(actor, Change::new("project.update", "project", project).with(serde_json::json!({"x": 1})));
        audit::take()
    })
    .await;
    audit::with_notes(carried, store.update_project(project, None, Some("molecular"), now())).await.unwrap();

    let all = |filter: AuditFilter| async move { store.audit_entries(&AuditFilter { limit: 10, ..filter }).await };
    let entries = all(AuditFilter::default()).await.unwrap();
    let said: Vec<_> = entries.iter().map(|e| (e.action.as_str(), e.request_id.as_str())).collect();
    assert_eq!(said, [("project.update", "req-3"), ("project.create", "req-1")]);
    let created = &entries[1];
    assert_eq!(
        (created.actor.as_deref(), created.actor_role.as_str(), created.target_name.as_deref(), created.project_id),
        (Some("ada"), "admin", Some("bio"), Some(project))
    );
    assert_eq!(entries[0].changes, serde_json::json!({"x": 1}));
    let mine = AuditFilter { visible_projects: Some(vec![project]), ..Default::default() };
    assert_eq!(all(mine).await.unwrap().len(), 1, "only the entry that names the project");
    let none = AuditFilter { visible_projects: Some(Vec::new()), ..Default::default() };
    assert!(all(none).await.unwrap().is_empty());
    let older = AuditFilter { before: Some(entries[0].seq), ..Default::default() };
    assert_eq!(all(older).await.unwrap().len(), 1);
    assert_eq!(store.prune_audit(now() - chrono::Duration::hours(1)).await.unwrap(), 0);
    assert_eq!(store.prune_audit(now() + chrono::Duration::seconds(1)).await.unwrap(), 2);
    assert!(all(AuditFilter::default()).await.unwrap().is_empty());
}

/// Idempotency keys: the first request claims a key; the same request sees it running, then its
/// kept answer; another request with the key is told so; a claim left unanswered is taken over
/// once abandoned; a released key is free again; keys expire; keys are each user's own.
pub async fn idempotency_keys(store: &Store) {
    use mission_store::{IdempotencyClaim, KeptAnswer};
    let (alice, bob) = (Uuid::new_v4(), Uuid::new_v4());
    let at = now();
    let minutes = |m: i64| chrono::Duration::minutes(m);
    let claim = |user, key: &'static str, fingerprint: &'static str, now: DateTime<Utc>| async move {
        store
            .claim_idempotency_key(user, key, fingerprint, now, now - minutes(5), now - minutes(24 * 60))
            .await
            .unwrap()
    };
    assert_eq!(claim(alice, "k1", "create a", at).await, IdempotencyClaim::Claimed);
    assert_eq!(claim(alice, "k1", "create a", at).await, IdempotencyClaim::Running);
    assert_eq!(claim(alice, "k1", "create b", at).await, IdempotencyClaim::OtherRequest);
    assert_eq!(claim(bob, "k1", "create b", at).await, IdempotencyClaim::Claimed, "keys are each user's own");
    let answer =
        KeptAnswer { status: 201, content_type: Some("application/json".into()), body: b"{\"id\":1}".to_vec() };
    store.keep_idempotent_answer(alice, "k1", &answer).await.unwrap();
    assert_eq!(claim(alice, "k1", "create a", at + minutes(10)).await, IdempotencyClaim::Answered(answer.clone()));
    assert_eq!(claim(alice, "k1", "create b", at + minutes(10)).await, IdempotencyClaim::OtherRequest);

    // Bob's claim never answered: after five minutes it is abandoned, and a retry takes it.
    assert_eq!(claim(bob, "k1", "create b", at + minutes(4)).await, IdempotencyClaim::Running);
    assert_eq!(claim(bob, "k1", "create b", at + minutes(6)).await, IdempotencyClaim::Claimed);
    store.release_idempotency_key(bob, "k1").await.unwrap();
    assert_eq!(claim(bob, "k1", "create c", at + minutes(7)).await, IdempotencyClaim::Claimed, "released");

    // A day on, alice's key is forgotten: the same key names a new request.
    assert_eq!(claim(alice, "k1", "create b", at + minutes(24 * 60 + 1)).await, IdempotencyClaim::Claimed);
    // Pruning removes what expired (bob's key, claimed at +7 min) and keeps the rest.
    assert_eq!(store.prune_idempotency_keys(at + minutes(8)).await.unwrap(), 1);
    assert_eq!(claim(alice, "k1", "create b", at + minutes(24 * 60 + 2)).await, IdempotencyClaim::Running);
    assert_eq!(claim(bob, "k1", "create b", at + minutes(9)).await, IdempotencyClaim::Claimed, "pruned");
}

/// What the scheduler reads to send a batch's jobs, in one query: a stored job's row, a new
/// job's facts from its user and mission, the mission's files (by path, with the first job of
/// each mission only), the station's owner; a job gone has no row.
pub async fn placement_facts_for_a_batch(store: &Store) {
    use mission_store::PlacementAsk;
    let (m, _) = mission_with_lz(store).await;
    for (path, size) in [("b.txt", 2), ("a/x.txt", 1)] {
        upload(store, &file(&m, path, size)).await;
    }
    let other = mission(m.user_id, "other", now());
    store.insert_mission(&other).await.unwrap();
    let stored = job(&m, LOCAL_STATION);
    store.save_jobs(&numbered(store, std::slice::from_ref(&stored)).await, &[], &[]).await.unwrap();
    let gone = Uuid::new_v4();
    let asks = [
        PlacementAsk::Stored { job_id: stored.job_id, station_id: LOCAL_STATION },
        PlacementAsk::New { user_id: m.user_id, mission_id: m.mission_id, station_id: LOCAL_STATION },
        PlacementAsk::New { user_id: m.user_id, mission_id: other.mission_id, station_id: Uuid::new_v4() },
        PlacementAsk::Stored { job_id: gone, station_id: LOCAL_STATION },
    ];
    let facts = store.placement_facts(&asks).await.unwrap();
    assert_eq!(facts.len(), 4);
    let row = facts[0].job.as_ref().expect("the stored job's row");
    assert_eq!((row.job_id, row.command.clone(), row.memory_amount), (stored.job_id, stored.command, 256));
    assert_eq!(facts[0].user, Some(("ada".to_owned(), false)));
    assert_eq!(facts[0].station.map(|(owner, _)| owner), Some(None), "local has no owner");
    let files = facts[0].files.clone().expect("the mission's first job has its files");
    let input =
        |path: &str, size| mission_api::lz::InputFile { path: path.into(), size, sha256: format!("{size:064x}") };
    assert_eq!(files, [input("a/x.txt", 1), input("b.txt", 2)]);
    assert!(facts[1].job.is_none() && facts[1].files.is_none(), "the same mission's second job");
    assert_eq!(facts[1].user, Some(("ada".to_owned(), false)));
    assert_eq!(facts[2].files, Some(Vec::new()), "a mission without files");
    assert!(facts[2].station.is_none(), "a station that is not there");
    assert!(facts[3].job.is_none() && facts[3].user.is_none(), "a job that is gone");
    assert!(store.placement_facts(&[]).await.unwrap().is_empty());
}
