//! `cargo run -p testkit --example tiny_segments -- DIR COUNT`: a partition of COUNT tiny
//! segments ([`testkit::write_tiny_segments`]), for measuring by hand.
fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().expect("DIR");
    let count: u32 = args
        .next()
        .expect("COUNT")
        .parse()
        .expect("COUNT is a number");
    let end = testkit::write_tiny_segments(std::path::Path::new(&dir), count)?;
    println!("{dir}: {count} segments, log end {end}");
    Ok(())
}
