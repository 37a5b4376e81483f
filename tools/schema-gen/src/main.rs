//! `schema-gen`: reads Kafka's message schema JSON files (the `common/message/*.json` and
//! `common/metadata/*.json` files shipped in Kafka's jars) and writes one Rust module of decoders
//! per family of records, for `seglog dump`'s internal-topic decoders
//! (`src/cli/dump/decoders/generated/`).
//!
//! ```text
//! schema-gen <out-dir> <family>=<schema-dir>[:<name-prefix>,...] ...
//! ```
//!
//! Every generated decoder reads one struct at one version the way Kafka's generated
//! `Message.read(Readable, short)` does (flexible versions, compact lengths, nullable fields,
//! tagged fields, nested and common structs) and builds the JSON tree Kafka's generated
//! `*JsonConverter.write(message, version)` builds: fields in schema order, fields absent from the
//! version left out, tagged fields written only when they differ from their default. Decoders
//! return `Result`; none can panic (every read goes through the runtime's bounds-checked reader).
//!
//! The schemas are read at generation time only; the generated code is committed, so building
//! seglog needs neither Java nor Maven. `tools/schema-gen/regen.sh` fetches the schemas from
//! Maven Central and runs this program.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::Value;

/// An inclusive version range; `None` in a field stands for "none".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Versions {
    lo: i16,
    hi: i16,
}

impl Versions {
    fn parse(s: &str) -> Result<Option<Versions>, String> {
        let s = s.trim();
        if s == "none" || s.is_empty() {
            return Ok(None);
        }
        let num = |t: &str| {
            t.trim()
                .parse::<i16>()
                .map_err(|e| format!("bad version {s:?}: {e}"))
        };
        if let Some(lo) = s.strip_suffix('+') {
            return Ok(Some(Versions {
                lo: num(lo)?,
                hi: i16::MAX,
            }));
        }
        if let Some((lo, hi)) = s.split_once('-') {
            return Ok(Some(Versions {
                lo: num(lo)?,
                hi: num(hi)?,
            }));
        }
        let v = num(s)?;
        Ok(Some(Versions { lo: v, hi: v }))
    }

    /// Kafka's `VersionConditional.forVersions(r, valid)`: the test of `v` against `r` that
    /// Kafka's generated code makes inside a struct whose versions are `valid` — bounds that
    /// `valid` already implies are not tested, so a version outside `valid` is read the way the
    /// nearest valid version is (Kafka reads coordinator keys at version = record type).
    fn cond_in(r: Option<Versions>, valid: Option<Versions>) -> String {
        let (Some(r), Some(valid)) = (r, valid) else {
            return Versions::cond(r);
        };
        if r.hi < valid.lo || r.lo > valid.hi {
            return "false".to_owned();
        }
        let lo = r.lo > valid.lo;
        let hi = r.hi < valid.hi;
        match (lo, hi) {
            (false, false) => "true".to_owned(),
            (true, false) => format!("v >= {}", r.lo),
            (false, true) => format!("v <= {}", r.hi),
            (true, true) if r.lo == r.hi => format!("v == {}", r.lo),
            (true, true) => format!("({}..={}).contains(&v)", r.lo, r.hi),
        }
    }

    /// A Rust boolean expression testing `v` against this range.
    fn cond(r: Option<Versions>) -> String {
        match r {
            None => "false".to_owned(),
            Some(Versions { lo, hi }) if lo <= 0 && hi == i16::MAX => "v >= 0".to_owned(),
            Some(Versions { lo, hi }) if hi == i16::MAX => format!("v >= {lo}"),
            Some(Versions { lo, hi }) if lo == hi => format!("v == {lo}"),
            Some(Versions { lo, hi }) => format!("({lo}..={hi}).contains(&v)"),
        }
    }
}

/// A field's type, from the schema's `type` string.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ty {
    Bool,
    Int8,
    Int16,
    Uint16,
    Int32,
    Uint32,
    Int64,
    Float64,
    Uuid,
    String,
    Bytes,
    Records,
    Struct(String),
    Array(Box<Ty>),
}

impl Ty {
    fn parse(s: &str) -> Ty {
        if let Some(inner) = s.strip_prefix("[]") {
            return Ty::Array(Box::new(Ty::parse(inner)));
        }
        match s {
            "bool" => Ty::Bool,
            "int8" => Ty::Int8,
            "int16" => Ty::Int16,
            "uint16" => Ty::Uint16,
            "int32" => Ty::Int32,
            "uint32" => Ty::Uint32,
            "int64" => Ty::Int64,
            "float64" => Ty::Float64,
            "uuid" => Ty::Uuid,
            "string" => Ty::String,
            "bytes" => Ty::Bytes,
            "records" => Ty::Records,
            other => Ty::Struct(other.to_owned()),
        }
    }
}

#[derive(Debug, Clone)]
struct Field {
    name: String,
    ty: Ty,
    versions: Option<Versions>,
    nullable: Option<Versions>,
    tagged: Option<Versions>,
    tag: Option<u32>,
    default: Option<String>,
}

#[derive(Debug, Clone)]
struct Struct {
    name: String,
    fields: Vec<Field>,
}

#[derive(Debug)]
struct Message {
    name: String,
    kind: String,
    api_key: Option<i16>,
    valid: Option<Versions>,
    flexible: Option<Versions>,
    /// The top-level struct first, then every nested and common struct.
    structs: Vec<Struct>,
}

/// Strips `//` line comments (outside strings) from Kafka's commented JSON.
fn strip_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut in_str = false;
    let mut escaped = false;
    let mut chars = src.chars().peekable();
    while let Some(c) = chars.next() {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        if c == '"' {
            in_str = true;
            out.push(c);
        } else if c == '/' && chars.peek() == Some(&'/') {
            for d in chars.by_ref() {
                if d == '\n' {
                    out.push('\n');
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn default_string(v: &Value) -> Option<String> {
    match v.get("default")? {
        Value::String(s) => Some(s.clone()),
        Value::Null => Some("null".to_owned()),
        other => Some(other.to_string()),
    }
}

fn parse_fields(list: &Value, out: &mut Vec<Struct>, owner: &str) -> Result<Vec<Field>, String> {
    let mut fields = Vec::new();
    for f in list
        .as_array()
        .ok_or(format!("{owner}: fields is not an array"))?
    {
        let name = str_of(f, "name").ok_or(format!("{owner}: field without a name"))?;
        let ty_s = str_of(f, "type").ok_or(format!("{owner}.{name}: no type"))?;
        let ty = Ty::parse(ty_s);
        let tagged = Versions::parse(str_of(f, "taggedVersions").unwrap_or("none"))?;
        // Kafka's FieldSpec: a tagged field without "versions" exists in its tagged versions.
        let versions = match str_of(f, "versions") {
            Some(v) => Versions::parse(v)?,
            None => tagged,
        };
        let nullable = Versions::parse(str_of(f, "nullableVersions").unwrap_or("none"))?;
        let tag = f.get("tag").and_then(Value::as_u64).map(|t| t as u32);
        if let Some(sub) = f.get("fields") {
            let sname = match &ty {
                Ty::Struct(s) => s.clone(),
                Ty::Array(inner) => match inner.as_ref() {
                    Ty::Struct(s) => s.clone(),
                    _ => return Err(format!("{owner}.{name}: fields on a non-struct type")),
                },
                _ => return Err(format!("{owner}.{name}: fields on a non-struct type")),
            };
            let sf = parse_fields(sub, out, &sname)?;
            out.push(Struct {
                name: sname,
                fields: sf,
            });
        }
        fields.push(Field {
            name: name.to_owned(),
            ty,
            versions,
            nullable,
            tagged,
            tag,
            default: default_string(f),
        });
    }
    Ok(fields)
}

fn parse_message(path: &Path) -> Result<Message, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value = serde_json::from_str(&strip_comments(&text))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let name = str_of(&v, "name")
        .ok_or(format!("{}: no name", path.display()))?
        .to_owned();
    let mut nested = Vec::new();
    let top = parse_fields(v.get("fields").unwrap_or(&Value::Null), &mut nested, &name)?;
    if let Some(common) = v.get("commonStructs").and_then(Value::as_array) {
        for c in common {
            let cname = str_of(c, "name").ok_or(format!("{name}: common struct without a name"))?;
            let f = parse_fields(c.get("fields").unwrap_or(&Value::Null), &mut nested, cname)?;
            nested.push(Struct {
                name: cname.to_owned(),
                fields: f,
            });
        }
    }
    let mut structs = vec![Struct {
        name: name.clone(),
        fields: top,
    }];
    structs.extend(nested);
    Ok(Message {
        kind: str_of(&v, "type").unwrap_or("data").to_owned(),
        api_key: v.get("apiKey").and_then(Value::as_i64).map(|k| k as i16),
        valid: Versions::parse(str_of(&v, "validVersions").unwrap_or("none"))?,
        flexible: Versions::parse(str_of(&v, "flexibleVersions").unwrap_or("none"))?,
        name,
        structs,
    })
}

/// `OffsetCommitValue` → `offset_commit_value`.
fn snake(name: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower = i > 0 && chars.get(i - 1).is_some_and(|p| !p.is_ascii_uppercase());
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            let prev_upper = i > 0 && chars.get(i - 1).is_some_and(char::is_ascii_uppercase);
            if i > 0 && (prev_lower || (prev_upper && next_lower)) {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// Kafka's `MessageGenerator.toSnakeCase(name).toUpperCase()` for metadata record type names:
/// an underscore before every upper-case letter but the first (`TopicRecord` → `TOPIC_RECORD`).
fn kafka_enum_name(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if i > 0 && c.is_ascii_uppercase() {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// Kafka's `FieldSpec.camelCaseName()`: the first letter in lower case.
fn camel(name: &str) -> String {
    let mut c = name.chars();
    match c.next() {
        Some(f) => f.to_ascii_lowercase().to_string() + c.as_str(),
        None => String::new(),
    }
}

fn fn_name(msg: &Message, s: &str) -> String {
    if s == msg.name {
        format!("read_{}", snake(&msg.name))
    } else {
        format!("s_{}__{}", snake(&msg.name), snake(s))
    }
}

/// `Versions::cond_in` within `msg`'s valid versions.
fn vc(msg: &Message, r: Option<Versions>) -> String {
    Versions::cond_in(r, msg.valid)
}

/// The Rust expression reading one value of `ty` (never an array at the top level of this
/// function's callers), for field `fname`, giving `Json`.
fn read_expr(msg: &Message, ty: &Ty, fname: &str, nullable: &str) -> String {
    match ty {
        Ty::Bool => "Json::Bool(r.bool()?)".to_owned(),
        Ty::Int8 => "Json::Int(i64::from(r.i8()?))".to_owned(),
        Ty::Int16 => "Json::Int(i64::from(r.i16()?))".to_owned(),
        Ty::Uint16 => "Json::Int(i64::from(r.u16()?))".to_owned(),
        Ty::Int32 => "Json::Int(i64::from(r.i32()?))".to_owned(),
        Ty::Uint32 => "Json::Int(i64::from(r.u32()?))".to_owned(),
        Ty::Int64 => "Json::Int(r.i64()?)".to_owned(),
        Ty::Float64 => "Json::Float(r.f64()?)".to_owned(),
        Ty::Uuid => "Json::Str(r.uuid()?)".to_owned(),
        Ty::String => format!("r.string(flex, {nullable}, {fname:?})?"),
        Ty::Bytes | Ty::Records => format!("r.bytes(flex, {nullable}, {fname:?})?"),
        Ty::Struct(s) => {
            let f = fn_name(msg, s);
            format!("r.nullable_struct(flex, {nullable}, |r| {f}(r, v))?")
        }
        Ty::Array(inner) => {
            let elem = read_expr(msg, inner, fname, "false");
            format!("r.array(flex, {nullable}, {fname:?}, |r| Ok({elem}))?")
        }
    }
}

/// The JSON value a field has when it is absent (a tagged field not sent): its schema default
/// (`d_*` builds a default struct, Kafka's `new Struct()`).
fn default_json(msg: &Message, f: &Field) -> String {
    let d = f.default.clone();
    let d = d.as_deref().unwrap_or("");
    if let Ty::Struct(s) = &f.ty {
        // Kafka's generated messages start every struct field as `new Struct()`, even with a
        // "null" default.
        return format!("{}(v)", default_fn_name(msg, s));
    }
    if d == "null" {
        return "Json::Null".to_owned();
    }
    match &f.ty {
        Ty::Bool => format!("Json::Bool({})", d == "true"),
        Ty::Int8 | Ty::Int16 | Ty::Uint16 | Ty::Int32 | Ty::Uint32 | Ty::Int64 => {
            let n = if d.is_empty() {
                0
            } else if let Some(h) = d.strip_prefix("0x") {
                i64::from_str_radix(h, 16).unwrap_or(0)
            } else {
                d.parse::<i64>().unwrap_or(0)
            };
            format!("Json::Int({n})")
        }
        Ty::Float64 => format!("Json::Float({}f64)", d.parse::<f64>().unwrap_or(0.0)),
        Ty::Uuid => "Json::Str(ZERO_UUID.to_owned())".to_owned(),
        Ty::String => format!("Json::Str({d:?}.to_owned())"),
        Ty::Bytes | Ty::Records => "Json::Bytes(Vec::new())".to_owned(),
        Ty::Array(_) => "Json::Array(Vec::new())".to_owned(),
        Ty::Struct(_) => String::new(),
    }
}

fn default_fn_name(msg: &Message, s: &str) -> String {
    format!("d_{}__{}", snake(&msg.name), snake(s))
}

/// The statement that adds field `i` (value `f{i}: Option<Json>`) to the object `o` the way
/// Kafka's generated `JsonConverter.write` does: fields outside the version are absent (`None`);
/// a tagged field is written when it differs from its default, a tagged struct also when null
/// (Kafka: `x == null || !x.equals(new Struct())`).
fn push_field(msg: &Message, f: &Field, i: usize) -> String {
    let name = camel(&f.name);
    if f.tagged.is_none() {
        return format!("    if let Some(x) = f{i} {{ o.push(({name:?}, x)); }}");
    }
    let present = vc(msg, f.versions);
    let absent = default_json(msg, f);
    match &f.ty {
        Ty::Struct(st) => format!(
            "    if {present} {{ let x = f{i}.unwrap_or_else(|| {absent}); \
             if x == Json::Null || x != {}(v) {{ o.push(({name:?}, x)); }} }}",
            default_fn_name(msg, st)
        ),
        _ => {
            format!("    if let Some(x) = f{i} {{ if x != {absent} {{ o.push(({name:?}, x)); }} }}")
        }
    }
}

/// `d_*`: the JSON Kafka writes for `new Struct()` at version `v`.
fn gen_default_struct(msg: &Message, s: &Struct, out: &mut String) {
    let _ = writeln!(
        out,
        "/// `new {}()` as Kafka's JSON converter writes it (schema `{}`).",
        s.name, msg.name
    );
    let _ = writeln!(
        out,
        "fn {}(v: i16) -> Json {{",
        default_fn_name(msg, &s.name)
    );
    let _ = writeln!(
        out,
        "    let mut o: Vec<(&'static str, Json)> = Vec::new();"
    );
    for (i, f) in s.fields.iter().enumerate() {
        let present = vc(msg, f.versions);
        let tagged_now = vc(msg, f.tagged);
        let absent = default_json(msg, f);
        let _ = writeln!(
            out,
            "    let f{i}: Option<Json> = if ({present}) && !({tagged_now}) {{ Some({absent}) }} else {{ None }};"
        );
        let push = push_field(msg, f, i);
        if f.tagged.is_some() {
            // A tagged field of a default struct has its default value.
            let _ = writeln!(
                out,
                "    let f{i}: Option<Json> = if {present} {{ Some({absent}) }} else {{ f{i} }};"
            );
        }
        let _ = writeln!(out, "{push}");
    }
    let _ = writeln!(out, "    Json::Object(o)");
    let _ = writeln!(out, "}}\n");
}

fn gen_struct(msg: &Message, s: &Struct, out: &mut String) {
    let fname = fn_name(msg, &s.name);
    let top = s.name == msg.name;
    let _ = writeln!(
        out,
        "/// `{}`{} (schema `{}`).",
        s.name,
        if top { "" } else { " struct" },
        msg.name
    );
    let _ = writeln!(
        out,
        "{}fn {fname}(r: &mut Reader<'_>, v: i16) -> Result<Json, DecodeError> {{",
        if top { "pub " } else { "" }
    );
    // Like Kafka's generated `read`, no version check here: callers that care (the coordinator
    // serdes) check the version against `*_versions` first.
    let _ = writeln!(out, "    let flex = {};", vc(msg, msg.flexible));
    let has_tagged = s.fields.iter().any(|f| f.tagged.is_some());
    for (i, f) in s.fields.iter().enumerate() {
        let _ = writeln!(out, "    let mut f{i}: Option<Json> = None;");
        let nullable = vc(msg, f.nullable);
        let read = read_expr(msg, &f.ty, &f.name, &nullable);
        let present = vc(msg, f.versions);
        let tagged = vc(msg, f.tagged);
        if f.tagged.is_some() {
            let _ = writeln!(
                out,
                "    if ({present}) && !({tagged}) {{ f{i} = Some({read}); }}"
            );
        } else {
            let _ = writeln!(out, "    if {present} {{ f{i} = Some({read}); }}");
        }
    }
    if has_tagged {
        let _ = writeln!(out, "    if flex {{");
        let _ = writeln!(out, "        r.tagged_fields(|tag, r| {{");
        let _ = writeln!(out, "            match tag {{");
        for (i, f) in s.fields.iter().enumerate() {
            let (Some(tag), Some(_)) = (f.tag, f.tagged) else {
                continue;
            };
            let nullable = vc(msg, f.nullable);
            let read = read_expr(msg, &f.ty, &f.name, &nullable);
            let present = vc(msg, f.versions);
            let tagged = vc(msg, f.tagged);
            let _ = writeln!(
                out,
                "                {tag} if ({present}) && ({tagged}) => {{ f{i} = Some({read}); Ok(true) }}"
            );
        }
        let _ = writeln!(out, "                _ => Ok(false),");
        let _ = writeln!(out, "            }}");
        let _ = writeln!(out, "        }})?;");
        let _ = writeln!(out, "    }}");
    } else {
        let _ = writeln!(out, "    if flex {{ r.tagged_fields(|_, _| Ok(false))?; }}");
    }
    let _ = writeln!(
        out,
        "    let mut o: Vec<(&'static str, Json)> = Vec::new();"
    );
    for (i, f) in s.fields.iter().enumerate() {
        let _ = writeln!(out, "{}", push_field(msg, f, i));
    }
    let _ = writeln!(out, "    let _ = flex;");
    let _ = writeln!(out, "    Ok(Json::Object(o))");
    let _ = writeln!(out, "}}\n");
}

fn gen_family(family: &str, messages: &[Message]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "//! Decoders for Kafka's `{family}` records, generated by `tools/schema-gen` from Kafka's\n\
         //! message schema JSON files ({}). Do not edit: run `tools/schema-gen/regen.sh`.\n",
        messages
            .iter()
            .map(|m| format!("`{}`", m.name))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        out,
        "#![allow(clippy::all, non_snake_case, unused_mut, unused_variables, unused_comparisons, unused_imports, dead_code)]\n"
    );
    let _ = writeln!(
        out,
        "use super::super::wire::{{DecodeError, Json, Reader, ZERO_UUID}};\n"
    );
    for m in messages {
        for s in &m.structs {
            gen_struct(m, s, &mut out);
            if s.name != m.name {
                gen_default_struct(m, s, &mut out);
            }
        }
    }
    // Dispatch tables by record type (apiKey), per kind.
    let mut by_kind: BTreeMap<&str, Vec<&Message>> = BTreeMap::new();
    for m in messages {
        if m.api_key.is_some() {
            by_kind.entry(m.kind.as_str()).or_default().push(m);
        }
    }
    for (kind, ms) in by_kind {
        let k = snake(&kind.replace('-', "_"));
        let _ = writeln!(
            out,
            "/// Reads a `{kind}` record of type `api_key` at version `v`; `None` for an unknown type."
        );
        let _ = writeln!(
            out,
            "pub fn read_{k}(api_key: i16, r: &mut Reader<'_>, v: i16) -> Option<Result<Json, DecodeError>> {{"
        );
        let _ = writeln!(out, "    Some(match api_key {{");
        for m in &ms {
            let _ = writeln!(
                out,
                "        {} => read_{}(r, v),",
                m.api_key.unwrap_or(-1),
                snake(&m.name)
            );
        }
        let _ = writeln!(out, "        _ => return None,");
        let _ = writeln!(out, "    }})\n}}\n");
        let _ = writeln!(
            out,
            "/// The lowest and highest version of the `{kind}` schema of type `api_key`."
        );
        let _ = writeln!(
            out,
            "pub fn {k}_versions(api_key: i16) -> Option<(i16, i16)> {{"
        );
        let _ = writeln!(out, "    match api_key {{");
        for m in &ms {
            if let Some(vr) = m.valid {
                let _ = writeln!(
                    out,
                    "        {} => Some(({}, {})),",
                    m.api_key.unwrap_or(-1),
                    vr.lo,
                    vr.hi
                );
            }
        }
        let _ = writeln!(out, "        _ => None,");
        let _ = writeln!(out, "    }}\n}}\n");
        let _ = writeln!(
            out,
            "/// The schema name of the `{kind}` record of type `api_key`, and Kafka's enum constant for it."
        );
        let _ = writeln!(
            out,
            "pub fn {k}_name(api_key: i16) -> Option<(&'static str, &'static str)> {{"
        );
        let _ = writeln!(out, "    match api_key {{");
        for m in &ms {
            let base = m
                .name
                .strip_suffix("Key")
                .or_else(|| m.name.strip_suffix("Value"))
                .unwrap_or(&m.name);
            let _ = writeln!(
                out,
                "        {} => Some(({:?}, {:?})),",
                m.api_key.unwrap_or(-1),
                m.name,
                kafka_enum_name(if kind == "metadata" { &m.name } else { base })
            );
        }
        let _ = writeln!(out, "        _ => None,");
        let _ = writeln!(out, "    }}\n}}\n");
    }
    out
}

fn run(args: &[String]) -> Result<(), String> {
    let (out_dir, specs) = args
        .split_first()
        .ok_or("usage: schema-gen <out-dir> <family>=<schema-dir>[:<prefix>,...] ...")?;
    let out_dir = PathBuf::from(out_dir);
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("{}: {e}", out_dir.display()))?;
    for spec in specs {
        let (family, rest) = spec
            .split_once('=')
            .ok_or(format!("{spec}: expected <family>=<dir>"))?;
        let (dir, prefixes) = match rest.split_once(':') {
            Some((d, p)) => (d, p.split(',').map(str::to_owned).collect::<Vec<_>>()),
            None => (rest, Vec::new()),
        };
        let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| format!("{dir}: {e}"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .filter(|p| {
                let n = p.file_stem().map(|s| s.to_string_lossy().into_owned());
                prefixes.is_empty()
                    || n.is_some_and(|n| prefixes.iter().any(|pre| n.starts_with(pre.as_str())))
            })
            .collect();
        paths.sort();
        let mut messages = Vec::new();
        for p in &paths {
            messages.push(parse_message(p)?);
        }
        let code = gen_family(family, &messages);
        let target = out_dir.join(format!("{family}.rs"));
        std::fs::write(&target, code).map_err(|e| format!("{}: {e}", target.display()))?;
        eprintln!(
            "schema-gen: {} ({} schemas)",
            target.display(),
            messages.len()
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("schema-gen: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_kafka() {
        assert_eq!(snake("OffsetCommitValue"), "offset_commit_value");
        assert_eq!(snake("KRaftVersionRecord"), "k_raft_version_record");
        assert_eq!(kafka_enum_name("TopicRecord"), "TOPIC_RECORD");
        assert_eq!(camel("TopicId"), "topicId");
    }

    #[test]
    fn versions_parse() {
        assert_eq!(
            Versions::parse("3+").unwrap_or_default(),
            Some(Versions {
                lo: 3,
                hi: i16::MAX
            })
        );
        assert_eq!(Versions::parse("none").unwrap_or_default(), None);
        assert_eq!(
            Versions::cond(Versions::parse("1-3").unwrap_or_default()),
            "(1..=3).contains(&v)"
        );
    }

    #[test]
    fn comments_outside_strings_are_stripped() {
        let s = strip_comments("{ // c\n \"a\": \"http://x\" }");
        assert_eq!(s, "{ \n \"a\": \"http://x\" }");
    }
}
