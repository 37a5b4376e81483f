//! What the benches that run Apache Kafka's own code share: where the repository is and where
//! `tools/kafka/fetch.sh` put Kafka's jars and the harness.

use std::path::PathBuf;

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The folder holding Kafka's jars (`lib/`) and `harness.jar`: `SEGLOG_KAFKA_HOME` if set,
/// else `target/kafka/<the pom's kafka.version>`. Exits with one line if the jars are missing.
pub fn kafka_home() -> PathBuf {
    if let Some(h) = std::env::var_os("SEGLOG_KAFKA_HOME") {
        return PathBuf::from(h);
    }
    let pom = std::fs::read_to_string(repo().join("tools/kafka/pom.xml")).expect("pom.xml");
    let v = pom
        .split("<kafka.version>")
        .nth(1)
        .and_then(|r| r.split('<').next())
        .expect("<kafka.version>")
        .trim()
        .to_string();
    let home = repo().join("target/kafka").join(&v);
    if !home.join("harness.jar").is_file() {
        eprintln!(
            "Apache Kafka {v} jars are missing under {}: run tools/kafka/fetch.sh first",
            home.display()
        );
        std::process::exit(1);
    }
    home
}
