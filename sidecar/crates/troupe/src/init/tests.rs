//! `troupe init`'s own tests: how the project's files name the binary.

use super::*;

#[test]
fn the_binary_is_named_troupe_when_it_is_the_one_on_path() {
    let dir = tempfile::tempdir().unwrap();
    let (bin, other) = (dir.path().join("bin"), dir.path().join("other"));
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let me = bin.join("troupe");
    std::fs::write(&me, "").unwrap();
    std::fs::write(other.join("troupe"), "").unwrap();
    let path = |dirs: &[&Path]| Some(std::env::join_paths(dirs).unwrap());
    assert_eq!(command_name(&me, path(&[&bin, &other])), "troupe");
    // Another troupe first on PATH, or none: the absolute path.
    assert_eq!(
        command_name(&me, path(&[&other, &bin])),
        me.display().to_string()
    );
    assert_eq!(command_name(&me, None), me.display().to_string());
}
