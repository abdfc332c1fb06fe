//! Messages the daemon itself sends (party notifications, agent results, escalations): from
//! the project's system session, stored like any message, then the recipients are woken.

use troupe_store::{MessageType, NewMessage, Priority, Recipients, Store, StoreError};

use crate::hub::Hub;

/// Sends `text` from the system session of the project rooted at `project_root`.
pub async fn send_system(
    store: &Store,
    hub: &Hub,
    project_root: &str,
    recipients: Recipients,
    text: String,
    priority: Priority,
    idempotency_key: Option<String>,
) -> Result<(), StoreError> {
    let name = std::path::Path::new(project_root)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let system = store.system_session(project_root.to_string(), name).await?;
    let outcome = store
        .send_message(NewMessage {
            from_session_id: system.session_id,
            recipients,
            content: text,
            priority,
            message_type: Some(MessageType::System),
            idempotency_key,
        })
        .await?;
    for m in &outcome.messages {
        hub.publish(&m.to_session_id, m.seq);
    }
    Ok(())
}
