//! `ask_person` and `answer_question`: an agent asks a person a question (with choices, or for
//! free text) and long-polls for the answer, like `request_permission`; the question waits in
//! the inbox, is answered once from any door, and expires with the run that asked.

use std::time::Duration;

use troupe_api::ApiError;
use troupe_api::types::*;
use troupe_store::NewQuestion;

use crate::daemon::Daemon;
use crate::hub::wake_key;

const DEFAULT_WAIT_MS: u64 = 30_000;

fn result(q: &Question) -> QuestionResult {
    QuestionResult {
        question_id: q.question_id.clone(),
        status: q.status,
        answer: q.answer.clone(),
    }
}

pub async fn ask_person(d: &Daemon, p: AskPersonParams) -> Result<QuestionResult, ApiError> {
    const OP: &str = "ask_person";
    let wait_ms = p.wait_ms.unwrap_or(DEFAULT_WAIT_MS);
    if wait_ms > super::MAX_WAIT_MS {
        return Err(ApiError::invalid(
            OP,
            format!(
                "wait_ms {wait_ms} is over the maximum of {}",
                super::MAX_WAIT_MS
            ),
        ));
    }
    let asked = match &p.question_id {
        Some(id) => {
            let q = d.store.get_question(id)?;
            if q.session_id != p.session_id {
                return Err(ApiError::Forbidden(format!(
                    "question {id} belongs to session {}, not {}",
                    q.session_id, p.session_id
                )));
            }
            q
        }
        None => {
            let text = p
                .question
                .as_deref()
                .map(str::trim)
                .filter(|q| !q.is_empty())
                .ok_or_else(|| {
                    ApiError::invalid(OP, "question is required (or question_id to wait on)")
                })?;
            if text.len() > QUESTION_MAX_BYTES {
                return Err(ApiError::invalid(
                    OP,
                    format!(
                        "question is {} bytes, over {QUESTION_MAX_BYTES}",
                        text.len()
                    ),
                ));
            }
            if p.choices.len() > QUESTION_MAX_CHOICES {
                return Err(ApiError::invalid(
                    OP,
                    format!("{} choices, over {QUESTION_MAX_CHOICES}", p.choices.len()),
                ));
            }
            if let Some(c) = p
                .choices
                .iter()
                .find(|c| c.trim().is_empty() || c.len() > CHOICE_MAX_BYTES)
            {
                return Err(ApiError::invalid(
                    OP,
                    format!("choice {c:?} is empty or over {CHOICE_MAX_BYTES} bytes"),
                ));
            }
            let session = d.store.get_session(&p.session_id)?;
            let run = d.store.run_of_session(&session.session_id)?;
            d.store
                .create_question(NewQuestion {
                    project_id: session.project_id.clone(),
                    session_id: session.session_id.clone(),
                    run_id: run.as_ref().map(|r| r.run_id.clone()),
                    party_id: run
                        .as_ref()
                        .and_then(|r| r.party_id.clone())
                        .or(session.party_id.clone()),
                    role_name: run.as_ref().and_then(|r| r.role_name.clone()),
                    question: text.to_string(),
                    choices: p.choices.clone(),
                })
                .await?
        }
    };
    // Watch, then read again: an answer given in between still wakes us.
    let key = wake_key(&asked.question_id);
    let mut wake = d.hub.watch(&key);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
    let mut current = d.store.get_question(&asked.question_id)?;
    while current.status == QuestionStatus::Pending {
        match tokio::time::timeout_at(deadline, wake.changed()).await {
            Ok(Ok(())) => current = d.store.get_question(&current.question_id)?,
            Ok(Err(_)) | Err(_) => break,
        }
    }
    drop(wake);
    if current.status != QuestionStatus::Pending {
        d.hub.forget(&key);
    }
    Ok(result(&current))
}

pub async fn answer_question(
    d: &Daemon,
    p: AnswerQuestionParams,
) -> Result<AnswerQuestionResult, ApiError> {
    const OP: &str = "answer_question";
    let q = d.store.get_question(&p.question_id)?;
    if !q.choices.is_empty() && !q.choices.contains(&p.answer) {
        return Err(ApiError::invalid(
            OP,
            format!(
                "answer {:?} is not one of the question's choices: {}",
                p.answer,
                q.choices.join(", ")
            ),
        ));
    }
    if q.choices.is_empty() && p.answer.trim().is_empty() {
        return Err(ApiError::invalid(OP, "answer is empty"));
    }
    let answered = d
        .store
        .answer_question(p.question_id, p.answer, p.answered_by)
        .await
        .map_err(|e| ApiError::from(e).in_op(OP))?;
    d.hub.publish(&wake_key(&answered.question_id), 1);
    Ok(AnswerQuestionResult { question: answered })
}
