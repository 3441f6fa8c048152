//! Every workload runs on every backend, through the store API and through each native
//! adapter, at a tiny scale: the benches and `statestore compare` measure real operations.

use statestore_benches::native::{BTreeTarget, DiskTarget, RedbTarget, RocksDbTarget, SledTarget};
use statestore_benches::{Driver, Fixture, Scale, Target, Workload, backends, prepare};

const SCALE: Scale = Scale {
    records: 2_500,
    ycsb_records: 1_000,
    value_len: None,
    key_len: statestore_benches::data::KEY_LEN,
};

/// Runs `workload` for up to 300 steps and returns the units done.
fn exercise<T: Target + ?Sized>(target: &T, workload: Workload) -> u64 {
    prepare(target, workload, SCALE, |_| {}).expect("preload");
    let mut driver = Driver::new(workload, SCALE);
    let mut units = 0;
    for _ in 0..300 {
        match driver
            .step(target)
            .unwrap_or_else(|err| panic!("{workload}: {err}"))
        {
            Some(done) => units += done,
            None => break,
        }
    }
    units
}

fn expected_units(workload: Workload) -> std::ops::RangeInclusive<u64> {
    match workload {
        // Loads end after every record: 3 batches of 1000, the last one short.
        Workload::LoadSeq | Workload::LoadRandom => SCALE.records..=SCALE.records,
        Workload::Range10 => 3_000..=3_000,
        Workload::Range100 => 30_000..=30_000,
        _ => 300..=300,
    }
}

#[test]
fn every_workload_runs_on_every_backend() {
    for backend in backends() {
        for workload in Workload::ALL {
            let fixture = Fixture::open(backend).expect(backend);
            let units = exercise(&fixture.target(), workload);
            assert!(
                expected_units(workload).contains(&units),
                "{backend}/{workload}: {units} units"
            );
        }
    }
}

#[test]
fn loads_write_every_record() {
    for workload in [Workload::LoadSeq, Workload::LoadRandom] {
        let fixture = Fixture::open("memory").expect("memory");
        exercise(&fixture.target(), workload);
        let len = fixture.store().approximate_len().expect("len");
        assert_eq!(len, SCALE.records, "{workload}");
    }
}

#[test]
fn every_workload_runs_on_every_native_engine() {
    for workload in Workload::ALL {
        let dir = tempfile::tempdir().expect("tempdir");
        let btree = BTreeTarget::new();
        let rocks = RocksDbTarget::open(&dir.path().join("rocksdb")).expect("rocksdb");
        let sled = SledTarget::open(&dir.path().join("sled")).expect("sled");
        let redb = RedbTarget::open(&dir.path().join("redb")).expect("redb");
        let targets: [(&str, &dyn Target); 4] = [
            ("btree", &btree),
            ("rocksdb", &rocks),
            ("sled", &sled),
            ("redb", &redb),
        ];
        for (name, target) in targets {
            let units = exercise(target, workload);
            assert!(
                expected_units(workload).contains(&units),
                "{name}/{workload}: {units}"
            );
        }
    }
}

#[test]
fn the_same_seed_issues_the_same_operations() {
    let run = || {
        let fixture = Fixture::open("memory").expect("memory");
        exercise(&fixture.target(), Workload::YcsbE);
        let pairs: Vec<_> = fixture
            .store()
            .prefix_scan(b"")
            .expect("scan")
            .collect::<Result<_, _>>()
            .expect("pairs");
        pairs
    };
    assert_eq!(run(), run());
}

fn pairs(fixture: &Fixture) -> Vec<(Vec<u8>, Vec<u8>)> {
    fixture
        .store()
        .prefix_scan(b"")
        .expect("scan")
        .collect::<Result<_, _>>()
        .expect("pairs")
}

#[test]
fn the_shards_of_a_load_write_every_record_once_as_one_driver_does() {
    for workload in [Workload::LoadSeq, Workload::LoadRandom] {
        let alone = Fixture::open("memory").expect("memory");
        let mut driver = Driver::new(workload, SCALE);
        while driver.step(&alone.target()).expect("step").is_some() {}
        let sharded = Fixture::open("memory").expect("memory");
        let mut written = 0;
        for shard in 0..3 {
            let mut driver = Driver::shard(workload, SCALE, shard, 3);
            while let Some(done) = driver.step(&sharded.target()).expect("step") {
                written += done;
            }
        }
        assert_eq!(written, SCALE.records, "{workload}: each record once");
        assert!(pairs(&alone) == pairs(&sharded), "{workload}");
    }
}

/// The keys YCSB E's shards `shards` (of 2) insert into one store, 400 steps each.
fn ycsb_e_inserts(shards: &[usize]) -> u64 {
    let fixture = Fixture::open("memory").expect("memory");
    prepare(&fixture.target(), Workload::YcsbE, SCALE, |_| {}).expect("preload");
    for &shard in shards {
        let mut driver = Driver::shard(Workload::YcsbE, SCALE, shard, 2);
        for _ in 0..400 {
            driver.step(&fixture.target()).expect("step");
        }
    }
    fixture.store().approximate_len().expect("len") - SCALE.ycsb_records
}

#[test]
fn the_shards_of_ycsb_e_insert_keys_of_their_own() {
    let (first, second) = (ycsb_e_inserts(&[0]), ycsb_e_inserts(&[1]));
    assert!(first > 0 && second > 0, "{first} and {second} inserts");
    assert_eq!(
        ycsb_e_inserts(&[0, 1]),
        first + second,
        "no key inserted twice"
    );
}
