//! Decoders for the KRaft control record values Kafka's dump tool prints as JSON
//! (`LeaderChangeMessage`, `SnapshotHeaderRecord`, `SnapshotFooterRecord`, `KRaftVersionRecord`),
//! rendered like Kafka's generated `*JsonConverter.write(..).toString()`: compact JSON, fields in
//! schema order, names in lower camel case, unknown tagged fields left out.
//!
//! All four schemas are flexible version 0 and are read at version 0 whatever their `Version`
//! field says (Kafka's `ControlRecordUtils.deserialize*`); bytes after the tagged-field section
//! are ignored, as Kafka's reader ignores them.
//!
//! ```text
//! LeaderChangeMessage   int16 Version | int32 LeaderId | []Voter Voters | []Voter GrantingVoters | tags
//!   Voter               int32 VoterId | tags
//! SnapshotHeaderRecord  int16 Version | int64 LastContainedLogTimestamp | tags
//! SnapshotFooterRecord  int16 Version | tags
//! KRaftVersionRecord    int16 Version | int16 KRaftVersion | tags
//! ```
//! `VotersRecord` (type 6, ` KRaftVoters `) is read by the decoder generated from Kafka's schema
//! (`decoders::generated::clients`), at version 0 like the others.

use record_format::internals::Cursor;
use record_format::ControlRecordType;

/// The label Kafka's dump tool prints before the JSON (`" LeaderChange: "`, `" SnapshotHeader "`,
/// ...) and the JSON itself, or `None` for types this module does not decode.
pub(crate) fn decode(
    t: ControlRecordType,
    value: &[u8],
) -> Option<Result<(&'static str, String), String>> {
    let label = match t {
        ControlRecordType::LeaderChange => " LeaderChange: ",
        ControlRecordType::SnapshotHeader => " SnapshotHeader ",
        ControlRecordType::SnapshotFooter => " SnapshotFooter ",
        ControlRecordType::KRaftVersion => " KRaftVersion ",
        ControlRecordType::KRaftVoters => {
            let mut r = super::decoders::wire::Reader::new(value, 0);
            return Some(
                super::decoders::generated::clients::read_voters_record(&mut r, 0)
                    .map(|j| (" KRaftVoters ", j.to_jackson()))
                    .map_err(|e| e.to_string()),
            );
        }
        _ => return None,
    };
    let mut c = Cursor::new(value, 0);
    let json = match t {
        ControlRecordType::LeaderChange => leader_change(&mut c),
        ControlRecordType::SnapshotHeader => snapshot_header(&mut c),
        ControlRecordType::SnapshotFooter => snapshot_footer(&mut c),
        _ => kraft_version(&mut c),
    };
    Some(json.map(|j| (label, j)))
}

type R<T> = Result<T, String>;

fn err(what: &str) -> impl Fn(record_format::FormatError) -> String + '_ {
    move |e| format!("cannot read {what}: {}", e.kind)
}

fn tagged_fields(c: &mut Cursor<'_>) -> R<()> {
    let n = c.unsigned_varint().map_err(err("tagged field count"))?;
    for _ in 0..n {
        c.unsigned_varint().map_err(err("tagged field tag"))?;
        let size = c.unsigned_varint().map_err(err("tagged field size"))?;
        c.bytes(size as usize).map_err(err("tagged field"))?;
    }
    Ok(())
}

fn voters(c: &mut Cursor<'_>, field: &str) -> R<String> {
    let n = c.unsigned_varint().map_err(err(field))?;
    if n == 0 {
        return Err(format!("non-nullable field {field} was serialized as null"));
    }
    let mut out = String::from("[");
    for i in 0..n - 1 {
        let id = c.i32().map_err(err("VoterId"))?;
        tagged_fields(c)?;
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("{{\"voterId\":{id}}}"));
    }
    out.push(']');
    Ok(out)
}

fn leader_change(c: &mut Cursor<'_>) -> R<String> {
    let version = c.i16().map_err(err("Version"))?;
    let leader = c.i32().map_err(err("LeaderId"))?;
    let voters_json = voters(c, "Voters")?;
    let granting = voters(c, "GrantingVoters")?;
    tagged_fields(c)?;
    Ok(format!(
        "{{\"version\":{version},\"leaderId\":{leader},\"voters\":{voters_json},\"grantingVoters\":{granting}}}"
    ))
}

fn snapshot_header(c: &mut Cursor<'_>) -> R<String> {
    let version = c.i16().map_err(err("Version"))?;
    let ts = c.i64().map_err(err("LastContainedLogTimestamp"))?;
    tagged_fields(c)?;
    Ok(format!(
        "{{\"version\":{version},\"lastContainedLogTimestamp\":{ts}}}"
    ))
}

fn snapshot_footer(c: &mut Cursor<'_>) -> R<String> {
    let version = c.i16().map_err(err("Version"))?;
    tagged_fields(c)?;
    Ok(format!("{{\"version\":{version}}}"))
}

fn kraft_version(c: &mut Cursor<'_>) -> R<String> {
    let version = c.i16().map_err(err("Version"))?;
    let kv = c.i16().map_err(err("KRaftVersion"))?;
    tagged_fields(c)?;
    Ok(format!("{{\"version\":{version},\"kRaftVersion\":{kv}}}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn decodes_the_kafka_written_values() {
        let v = unhex("00000000000104000000010000000002000000000300030000000100000000020000");
        let (label, json) = decode(ControlRecordType::LeaderChange, &v)
            .unwrap()
            .unwrap();
        assert_eq!(label, " LeaderChange: ");
        assert_eq!(
            json,
            r#"{"version":0,"leaderId":1,"voters":[{"voterId":1},{"voterId":2},{"voterId":3}],"grantingVoters":[{"voterId":1},{"voterId":2}]}"#
        );
        let (label, json) = decode(
            ControlRecordType::SnapshotHeader,
            &unhex("00000000018bcfe567ff00"),
        )
        .unwrap()
        .unwrap();
        assert_eq!(label, " SnapshotHeader ");
        assert_eq!(
            json,
            r#"{"version":0,"lastContainedLogTimestamp":1699999999999}"#
        );
        let (_, json) = decode(ControlRecordType::KRaftVersion, &unhex("0000000100"))
            .unwrap()
            .unwrap();
        assert_eq!(json, r#"{"version":0,"kRaftVersion":1}"#);
        let (_, json) = decode(ControlRecordType::SnapshotFooter, &unhex("000000"))
            .unwrap()
            .unwrap();
        assert_eq!(json, r#"{"version":0}"#);
        assert!(decode(ControlRecordType::KRaftVoters, &[]).is_some_and(|r| r.is_err()));
        assert!(decode(ControlRecordType::SnapshotFooter, &[0])
            .unwrap()
            .is_err());
    }
}
