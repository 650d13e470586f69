use super::*;

/// The by-name accessors cover the table: every count axis reads and writes by its key,
/// the degrees and the shrinkable mesh keys are count axes, the flags and keywords are not.
#[test]
fn every_axis_is_reached_by_its_name() {
    let mut m = MeshConfig::DEFAULT;
    for key in KEYS {
        match m.count(key) {
            Some(n) => {
                assert!(m.set_count(key, n + 3), "{key}");
                assert_eq!(m.count(key), Some(n + 3), "{key}");
            }
            None => assert!(!m.set_count(key, 2), "{key}"),
        }
    }
    assert_eq!(m.count("sp"), None);
    assert_eq!(m.count("schedule"), None);
    assert_eq!(m.count("nope"), None);
    for (axis, n) in m.degrees() {
        assert_eq!(m.count(axis), Some(n), "{axis}");
    }
    let model_keys = 10;
    for key in &crate::engine_shrink::SHRINKABLE[model_keys..] {
        assert!(
            m.count(key).is_some(),
            "{key} is shrinkable but not a mesh count"
        );
    }
}

#[test]
fn rank_and_coord_are_inverse_and_tp_is_fastest() {
    let m = MeshConfig {
        dp: 2,
        tp: 2,
        pp: 2,
        cp: 2,
        ..MeshConfig::DEFAULT
    };
    for rank in 0..m.world_size() as usize {
        assert_eq!(m.rank(m.coord(rank)), rank);
    }
    let c = |tp, cp, dp, pp| Coord { tp, cp, dp, pp };
    assert_eq!(m.rank(c(1, 0, 0, 0)), 1);
    assert_eq!(m.rank(c(0, 1, 0, 0)), 2);
    assert_eq!(m.rank(c(0, 0, 1, 0)), 4);
    assert_eq!(m.rank(c(0, 0, 0, 1)), 8);
}
