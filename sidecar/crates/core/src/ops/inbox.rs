//! Handlers of the one inbox: list it, put away an item that has no answer of its own.

use troupe_api::ApiError;
use troupe_api::types::*;

use crate::daemon::Daemon;

pub async fn list_inbox(d: &Daemon, p: ListInboxParams) -> Result<InboxResult, ApiError> {
    let project = super::project_filter(d, "list_inbox", p.project_id, p.cwd)?;
    Ok(InboxResult {
        items: crate::inbox::items(&d.store, &d.layout, project)?,
    })
}

/// Puts an item away; answers with what is left in its project.
pub async fn dismiss_inbox_item(d: &Daemon, p: InboxItemParams) -> Result<InboxResult, ApiError> {
    const OP: &str = "dismiss_inbox_item";
    let items = crate::inbox::items(&d.store, &d.layout, None)?;
    let Some(item) = items.iter().find(|i| i.item_id == p.item_id) else {
        return Err(ApiError::NotFound {
            what: "inbox item".into(),
            id: p.item_id,
        });
    };
    if item.answer.op != OP {
        return Err(ApiError::invalid(
            OP,
            format!(
                "{} is answered with {}, not dismissed",
                item.item_id, item.answer.op
            ),
        ));
    }
    let project = item.project_id.clone();
    d.store.dismiss_inbox_item(p.item_id).await?;
    // What is left of that item's project.
    Ok(InboxResult {
        items: crate::inbox::items(&d.store, &d.layout, project.map(Some))?,
    })
}
