//! A `WHERE` clause of only the filters a listing is given, with their values bound by number.
//! SQLite cannot answer `(?1 IS NULL OR col = ?1)` through an index on `col`, so a listing
//! written that way walks its whole table whatever it is asked; written with only the given
//! filters, it goes through the index of the column it is filtered on.

use rusqlite::{Row, Statement, ToSql};

/// The conditions of one listing and the values they bind.
#[derive(Default)]
pub(crate) struct Filters<'a> {
    conditions: Vec<&'static str>,
    values: Vec<(usize, &'a dyn ToSql)>,
}

impl<'a> Filters<'a> {
    /// Adds `condition` (which names its value `?index`) when there is a value.
    pub(crate) fn given<T: ToSql>(
        &mut self,
        condition: &'static str,
        index: usize,
        value: Option<&'a T>,
    ) -> &mut Self {
        if let Some(value) = value {
            self.conditions.push(condition);
            self.values.push((index, value));
        }
        self
    }

    /// Adds `condition` (which binds no value) when `on`.
    pub(crate) fn when(&mut self, condition: &'static str, on: bool) -> &mut Self {
        if on {
            self.conditions.push(condition);
        }
        self
    }

    /// The conditions joined by `AND` (`1` when there are none).
    pub(crate) fn sql(&self) -> String {
        if self.conditions.is_empty() {
            "1".into()
        } else {
            self.conditions.join(" AND ")
        }
    }

    /// Binds the given values to `stmt` (prepared from SQL holding `self.sql()`).
    pub(crate) fn bind(&self, stmt: &mut Statement<'_>) -> rusqlite::Result<()> {
        for (index, value) in &self.values {
            stmt.raw_bind_parameter(*index, value)?;
        }
        Ok(())
    }

    /// Binds the given values to `stmt`, runs it and maps each row with `f`.
    pub(crate) fn collect<T, E: From<rusqlite::Error>>(
        &self,
        stmt: &mut Statement<'_>,
        mut f: impl FnMut(&Row<'_>) -> Result<T, E>,
    ) -> Result<Vec<T>, E> {
        self.bind(stmt)?;
        let mut rows = stmt.raw_query();
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(f(row)?);
        }
        Ok(out)
    }
}
