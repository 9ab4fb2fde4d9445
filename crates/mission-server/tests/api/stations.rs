//! Stations end to end: the default station, admin-only creation, owners managing members and
//! landing zones, visibility, LZ tokens stored hashed.

use mission_client::{CreateStation, DEFAULT_STATION_NAME, Error, RegisterLandingZone, UpdateStation, Uuid};
use mission_testkit::TestServer;

use crate::{http, status, token_for};

#[tokio::test]
async fn stations_members_and_landing_zones() {
    let server = TestServer::spawn().await;
    for (name, admin) in [("root", true), ("olga", false), ("bob", false)] {
        server.add_user(name, admin).await;
    }
    let alice = &server.client;
    let root = server.sign_in("root").await;
    let olga = server.sign_in("olga").await;
    let bob = server.sign_in("bob").await;
    let olga_id = olga.whoami().await.unwrap().user_id;

    // A first start has the open default station, managed by admins.
    let stations = alice.list_stations().await.unwrap();
    assert_eq!(stations.len(), 1);
    let local = &stations[0];
    assert_eq!((local.name.as_str(), local.open, local.owner_id), (DEFAULT_STATION_NAME, true, None));
    assert_eq!(
        status(
            alice
                .register_landing_zone(
                    local.station_id,
                    &RegisterLandingZone { name: "x".into(), cluster_account: None }
                )
                .await
        )
        .0,
        403
    );

    // Only admins create stations; names are unique and checked.
    let request = CreateStation { name: "gpu".into(), owner_id: Some(olga_id), ..Default::default() };
    assert_eq!(status(alice.create_station(&request).await).0, 403);
    let gpu = root.create_station(&request).await.unwrap();
    assert_eq!((gpu.owner_id, gpu.open), (Some(olga_id), false));
    assert_eq!(status(root.create_station(&request).await).0, 409);
    let nameless = CreateStation { name: "  ".into(), ..Default::default() };
    assert_eq!(status(root.create_station(&nameless).await), (400, Some("name".into())));
    let ghost_owner = CreateStation { name: "g".into(), owner_id: Some(Uuid::new_v4()), ..Default::default() };
    assert_eq!(status(root.create_station(&ghost_owner).await), (400, Some("owner_id".into())));

    // A closed station is invisible to non-members; its owner sees and manages it.
    assert!(matches!(alice.get_station(gpu.station_id).await, Err(Error::NotFound(_))));
    assert_eq!(alice.list_stations().await.unwrap().len(), 1);
    assert_eq!(olga.get_station(gpu.station_id).await.unwrap(), gpu);
    olga.add_station_member(gpu.station_id, "alice").await.unwrap();
    olga.add_station_member(gpu.station_id, "alice").await.unwrap();
    assert_eq!(status(olga.add_station_member(gpu.station_id, "nobody").await), (404, None));
    let members = olga.station_members(gpu.station_id).await.unwrap();
    assert_eq!(members.iter().map(|m| m.username.as_str()).collect::<Vec<_>>(), ["alice"]);
    assert_eq!(alice.get_station(gpu.station_id).await.unwrap().name, "gpu", "members see it");
    assert_eq!(alice.list_stations().await.unwrap().len(), 2);
    assert_eq!(status(alice.station_members(gpu.station_id).await).0, 403, "members do not manage");
    assert!(matches!(bob.station_members(gpu.station_id).await, Err(Error::NotFound(_))));

    // Its owner changes what it is: the rest stays; members and strangers may not.
    assert!(gpu.reclaim, "stations reclaim borrowed room unless told not to");
    let quiet = UpdateStation { description: Some("the GPU racks".into()), reclaim: Some(false), ..Default::default() };
    let changed = olga.update_station(gpu.station_id, &quiet).await.unwrap();
    assert_eq!((changed.description.as_str(), changed.reclaim, changed.open), ("the GPU racks", false, false));
    assert_eq!(olga.get_station(gpu.station_id).await.unwrap(), changed);
    assert_eq!(status(alice.update_station(gpu.station_id, &quiet).await).0, 403);
    assert!(matches!(bob.update_station(gpu.station_id, &quiet).await, Err(Error::NotFound(_))));
    let nul = UpdateStation { description: Some("a\0b".into()), ..Default::default() };
    assert_eq!(status(olga.update_station(gpu.station_id, &nul).await), (400, Some("description".into())));
    let unknown = http()
        .patch(format!("{}/api/v1/stations/{}", server.url, gpu.station_id))
        .bearer_auth(token_for(&server, "olga").await)
        .json(&serde_json::json!({"name": "renamed"}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 400, "unknown fields are refused");

    // Landing zones: the token is answered once and stored only hashed.
    let registered = olga
        .register_landing_zone(gpu.station_id, &RegisterLandingZone { name: "node-1".into(), cluster_account: None })
        .await
        .unwrap();
    assert!(registered.token.len() >= 40);
    assert!(!registered.landing_zone.online && registered.landing_zone.resources.is_none());
    let again = olga
        .register_landing_zone(gpu.station_id, &RegisterLandingZone { name: "node-1".into(), cluster_account: None })
        .await;
    assert_eq!(status(again).0, 409);
    let lzs = alice.list_landing_zones(gpu.station_id).await.unwrap();
    assert_eq!(lzs, std::slice::from_ref(&registered.landing_zone));
    assert!(!serde_json::to_string(&lzs).unwrap().contains(&registered.token));
    for file in ["mission.db", "mission.db-wal"] {
        let bytes = std::fs::read(server.app.config.data_dir.join(file)).unwrap_or_default();
        assert!(!bytes.windows(registered.token.len()).any(|w| w == registered.token.as_bytes()), "token in {file}");
    }
    let hash = mission_server::idp::hash_secret(&registered.token);
    let stored = ["mission.db", "mission.db-wal"].iter().any(|file| {
        let bytes = std::fs::read(server.app.config.data_dir.join(file)).unwrap_or_default();
        bytes.windows(hash.len()).any(|w| w == hash.as_bytes())
    });
    assert!(stored, "the hash is what is stored");
    assert_eq!(status(alice.remove_landing_zone(gpu.station_id, registered.landing_zone.lz_id).await).0, 403);
    assert!(olga.remove_landing_zone(gpu.station_id, registered.landing_zone.lz_id).await.unwrap());
    assert!(!olga.remove_landing_zone(gpu.station_id, registered.landing_zone.lz_id).await.unwrap());

    // Members leave; only admins delete stations.
    assert!(olga.remove_station_member(gpu.station_id, "alice").await.unwrap());
    assert!(!olga.remove_station_member(gpu.station_id, "alice").await.unwrap());
    assert!(matches!(alice.get_station(gpu.station_id).await, Err(Error::NotFound(_))));
    assert_eq!(status(olga.delete_station(gpu.station_id).await).0, 403);
    assert!(root.delete_station(gpu.station_id).await.unwrap());
    assert!(!root.delete_station(gpu.station_id).await.unwrap());
    assert_eq!(root.list_stations().await.unwrap().len(), 1);
}
