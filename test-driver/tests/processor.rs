//! The driver on one processor (no topology): the deserialization handler, stream-time
//! punctuators and keyless records placed round robin.

use std::time::Duration;

use statestore_tasks::operator_stores::Utf8;
use statestore_tasks::{
    ErrorAction, Processor, ProcessorContext, Punctuation, PunctuationType, StoreSpec, TaskContext,
    TasksConfig,
};
use statestore_test_driver::TestDriver;
use store_api::Result;

fn config(app: &str) -> TasksConfig {
    TasksConfig {
        application_id: app.to_owned(),
        input_topics: vec!["numbers".to_owned()],
        stores: vec![StoreSpec::new("sums", "memory")],
        deserialization_error: ErrorAction::DeadLetter,
        dead_letter_topic: Some("dlq".to_owned()),
        ..TasksConfig::default()
    }
}

/// Sums the numbers of its partition; every 10 ms of stream time sends the sum.
struct Sum;

fn sum_of(ctx: &TaskContext<'_>) -> Result<u64> {
    let sums = ctx.store("sums")?;
    Ok(sums
        .get(b"sum")?
        .map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap_or_default())))
}

impl Processor for Sum {
    fn init(&mut self, ctx: &mut TaskContext<'_>) -> Result<()> {
        ctx.schedule(
            "report",
            Duration::from_millis(10),
            PunctuationType::StreamTime,
        )?;
        Ok(())
    }

    fn process(&mut self, ctx: &mut ProcessorContext<'_>) -> Result<()> {
        let text = ctx.value_as::<String, Utf8>()?.unwrap_or_default();
        let number: u64 = text.trim().parse().map_err(|_| {
            // A value that is UTF-8 but no number: a processing failure, not a decoding one.
            store_api::Error::invalid(format!("not a number: {text:?}"))
        })?;
        let sum = sum_of(ctx)? + number;
        ctx.store("sums")?.put(b"sum", &sum.to_be_bytes())
    }

    fn punctuate(&mut self, ctx: &mut TaskContext<'_>, at: &Punctuation<'_>) -> Result<()> {
        let sum = sum_of(ctx)?.to_string();
        let time = at.time.to_string();
        ctx.send("reports", Some(time.as_bytes()), Some(sum.as_bytes()));
        Ok(())
    }
}

#[test]
fn an_undecodable_value_goes_to_the_dead_letter_topic_under_deserialization_error() {
    let driver = TestDriver::processor(config("sums-dlq"), |_| Sum)
        .build()
        .expect("driver");
    let input = driver.input("numbers");
    input.pipe_input(Some(b"k"), Some(b"5"), 1).expect("5");
    input
        .pipe_input(Some(b"k"), Some(&[0xff, 0xfe]), 2)
        .expect("not UTF-8: dead letter");
    input.pipe_input(Some(b"k"), Some(b"7"), 3).expect("7");
    let sums = driver.store("sums").expect("store");
    assert_eq!(
        sums.get(b"sum").expect("get"),
        Some(12u64.to_be_bytes().to_vec())
    );
    drop(sums);
    let letter = driver.output("dlq").read_record().expect("a dead letter");
    assert_eq!(letter.record.value, Some(vec![0xff, 0xfe]));
    assert!(driver.output("dlq").is_empty());
    // A processing failure is `processing_error`'s: `fail` by default.
    let err = input
        .pipe_input(Some(b"k"), Some(b"x"), 4)
        .expect_err("fails");
    assert!(err.to_string().contains("not a number"), "{err}");
}

#[test]
fn stream_time_punctuators_fire_from_the_records_timestamps() {
    let driver = TestDriver::processor(config("sums-punctuate"), |_| Sum)
        .build()
        .expect("driver");
    let input = driver.input("numbers");
    let reports = driver.output("reports");
    // The first punctuation is due at the first record's stream time.
    input.pipe_input(Some(b"k"), Some(b"1"), 100).expect("1");
    assert_eq!(
        reports.read_key_value(),
        Some((Some(b"100".to_vec()), Some(b"1".to_vec())))
    );
    input.pipe_input(Some(b"k"), Some(b"2"), 105).expect("2");
    assert!(reports.is_empty(), "not due before 110");
    driver
        .advance_wall_clock(Duration::from_secs(3600))
        .expect("wall clock");
    assert!(reports.is_empty(), "the wall clock moves no stream time");
    input.pipe_input(Some(b"k"), Some(b"3"), 131).expect("3");
    // Missed intervals are skipped: one call, at 131, the next due at 140.
    assert_eq!(
        reports.read_key_value(),
        Some((Some(b"131".to_vec()), Some(b"6".to_vec())))
    );
    assert!(reports.is_empty());
}

#[test]
fn keyless_records_go_round_robin_and_partitions_are_tasks() {
    let driver = TestDriver::processor(config("sums-round-robin"), |_| Sum)
        .partitions("numbers", 3)
        .build()
        .expect("driver");
    let input = driver.input("numbers");
    for n in 1..=6 {
        input
            .pipe_input(None, Some(n.to_string().as_bytes()), n)
            .expect("piped");
    }
    let sums = driver.store("sums").expect("store");
    assert_eq!(sums.partitions(), [0, 1, 2]);
    let per_partition: Vec<u64> = (0..3)
        .map(|p| {
            let sum = sums.get_in(p, b"sum").expect("get").expect("a sum");
            u64::from_be_bytes(sum.try_into().expect("8 bytes"))
        })
        .collect();
    assert_eq!(per_partition.iter().sum::<u64>(), 21);
    assert!(
        per_partition.iter().all(|&sum| sum > 0),
        "{per_partition:?}"
    );
}

#[test]
fn a_window_store_is_read_through_its_typed_handle() {
    use statestore_tasks::operator_stores::window::WindowStore;
    use statestore_tasks::{StoreHandle, StoreKind};

    let config = TasksConfig {
        application_id: "windows".to_owned(),
        input_topics: vec!["clicks".to_owned()],
        stores: vec![
            StoreSpec::new("per-10ms", "memory").with_kind(StoreKind::Window {
                retention_ms: 1_000,
                segment_interval_ms: None,
                retain_duplicates: false,
            }),
        ],
        ..TasksConfig::default()
    };
    let handle: StoreHandle<WindowStore> = StoreHandle::new(&config, "per-10ms").expect("handle");
    let in_task = handle.clone();
    let driver = TestDriver::processor(config, move |_| {
        let handle = in_task.clone();
        move |ctx: &mut ProcessorContext<'_>| {
            let windows = ctx.store_of(&handle)?;
            let key = ctx.key().unwrap_or_default().to_vec();
            let start = ctx.timestamp().unwrap_or_default() / 10 * 10;
            let n = windows.fetch_window(&key, start)?.map_or(0, |v| v[0]) + 1;
            let _stored = windows.put(&key, &[n], start)?;
            Ok(())
        }
    })
    .build()
    .expect("driver");
    let input = driver.input("clicks");
    for timestamp in [1, 5, 9, 12] {
        input
            .pipe_input(Some(b"u"), None, timestamp)
            .expect("click");
    }
    let counts = driver
        .with_store(0, &handle, |windows| {
            let first = windows.fetch_window(b"u", 0)?;
            let second = windows.fetch_window(b"u", 10)?;
            Ok::<_, store_api::Error>((first, second))
        })
        .expect("the store")
        .expect("read");
    assert_eq!(counts, (Some(vec![3]), Some(vec![1])));
    assert!(
        driver.with_store(1, &handle, |_| ()).is_err(),
        "one partition"
    );
}

#[test]
fn piping_while_a_store_is_held_is_an_error_not_a_panic() {
    let driver = TestDriver::processor(config("sums-held"), |_| Sum)
        .build()
        .expect("driver");
    let sums = driver.store("sums").expect("store");
    let err = driver
        .input("numbers")
        .pipe_input(None, Some(b"1"), 1)
        .expect_err("held");
    assert!(err.to_string().contains("still held"), "{err}");
    drop(sums);
    driver
        .input("numbers")
        .pipe_input(None, Some(b"1"), 1)
        .expect("piped");
}
