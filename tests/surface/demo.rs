//! The README's main command: `briefrail demo` plays the three scenes and exits 0 only if every
//! guarantee held.

use std::process::Command;

use briefrail::db::admin;
use briefrail::testing::server_url;
use uuid::Uuid;

#[tokio::test]
async fn the_demo_plays_three_scenes_and_every_guarantee_holds() {
    let name = format!("br_demo_{}", &Uuid::new_v4().simple().to_string()[..10]);
    let url = admin::with_database(&server_url(), &name).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_briefrail"))
        .arg("demo")
        .env("BRIEFRAIL__DATABASE__URL", &url)
        .output()
        .expect("run the demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    admin::drop_database(&server_url(), &format!("{name}_demo"))
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "demo failed\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "✓ 4 facts, 1 build (expected 1)",
        "✓ the Brief lists all three documents",
        "✓ the running build and 1 follow-up (expected exactly 1)",
        "✓ no frame with the zombie's token exists",
        "✓ every demand is served",
    ] {
        assert!(stdout.contains(line), "missing {line:?}\n{stdout}");
    }
    assert!(!stdout.contains('✗'), "{stdout}");
    assert!(stdout.contains("fenced"), "{stdout}");
}
