//! The mission-type catalogue.

use mission_client::{CreateMission, Uuid};
use mission_testkit::TestServer;

use crate::{http, problem, token_for};

#[tokio::test]
async fn catalogue_lists_gets_and_describes_settings() {
    let server = TestServer::spawn().await;
    let client = &server.client;
    let types = client.list_mission_types().await.unwrap();
    let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["shell", "python", "r", "julia", "command"]);
    for summary in &types {
        let detail = client.get_mission_type(summary.id).await.unwrap();
        assert_eq!((detail.id, &detail.name, &detail.version), (summary.id, &summary.name, &summary.version));
        let settings = client.get_mission_type_settings_info(summary.id).await.unwrap();
        assert_eq!(settings, detail.settings);
        assert!(!detail.command.is_empty());
        assert_eq!(detail.resources.cpu_count, 1);
    }
    let python = types.iter().find(|t| t.name == "python").unwrap();
    assert_eq!(python.id.to_string(), "c407e534-62e7-472b-8830-3d2ebe1bffbd", "ids are stable");
    let settings = client.get_mission_type_settings_info(python.id).await.unwrap();
    assert!(settings["filename"].starts_with("path (required)"), "{}", settings["filename"]);
    assert!(settings["interpreter"].contains("default python3"));
    let command = types.iter().find(|t| t.name == "command").unwrap();
    let settings = client.get_mission_type_settings_info(command.id).await.unwrap();
    assert!(settings.contains_key("command"));

    // Settings given per the info are accepted.
    let mission = client
        .create_mission(&CreateMission {
            name: "cmd".into(),
            mission_type_id: Some(command.id),
            settings: Some([("command".to_owned(), "python3 -c 'print(1)'".to_owned())].into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(mission.mission_type_id, Some(command.id));

    // Unknown and malformed ids.
    let missing = client.get_mission_type(Uuid::new_v4()).await.unwrap_err();
    assert!(matches!(missing, mission_client::Error::NotFound(_)));
    let token = token_for(&server, "alice").await;
    let response = http()
        .get(format!("{}/api/v1/mission-types/python/settings", server.url))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    let (status, p) = problem(response).await;
    assert_eq!(status, 400);
    assert!(p.detail.contains("mission_type_id"));
}
