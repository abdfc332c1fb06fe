//! The forge contract's own types: permissions.
use super::Permission;

#[test]
fn permissions_are_read_from_their_words_and_only_some_may_write() {
    let all = [
        Permission::Admin,
        Permission::Maintain,
        Permission::Write,
        Permission::Triage,
        Permission::Read,
        Permission::None,
    ];
    for permission in all {
        assert_eq!(Permission::parse(permission.as_str()), Some(permission));
        assert_eq!(permission.to_string(), permission.as_str());
    }
    assert_eq!(Permission::parse(" WRITE "), Some(Permission::Write));
    assert_eq!(Permission::parse("security-manager"), None);
    assert_eq!(Permission::parse(""), None);
    let writers: Vec<_> = all.into_iter().filter(|p| p.can_write()).collect();
    assert_eq!(
        writers,
        [Permission::Admin, Permission::Maintain, Permission::Write]
    );
    assert_eq!(
        serde_json::to_string(&Permission::Maintain).unwrap(),
        "\"maintain\""
    );
}
