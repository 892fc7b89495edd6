//! Keyset pages: one request type and one page type for every listing (a customer's holds, a
//! slot's roster, the operator's slot listing).
//!
//! A listing is ordered by a key that never changes ([`PageItem::Cursor`]); a page holds the
//! items after a cursor, at most `limit` of them, and says where the next page starts when it
//! was full. Nothing is counted or skipped, so a page costs the same however deep it is.

use std::fmt;
use std::marker::PhantomData;
use std::str::FromStr;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use super::hold::Hold;
use super::ids::{HoldId, SlotId};
use super::time::Timestamp;
use super::usage::SlotSummary;

/// The most items one page returns.
pub const MAX_PAGE_SIZE: u32 = 1_000;

/// The items a page returns when the caller does not say.
pub const DEFAULT_PAGE_SIZE: u32 = 100;

/// One page of a keyset listing: the items after `after` in the listing's order, at most
/// `limit` of them (`1..=`[`MAX_PAGE_SIZE`]). `C` is the listing's cursor: a [`HoldId`] for
/// holds (the default), a [`SlotCursor`] for the operator's slot listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageRequest<C = HoldId> {
    /// Only items after this cursor; `None` starts at the first.
    pub after: Option<C>,
    /// At most this many items.
    pub limit: u32,
}

impl<C> PageRequest<C> {
    /// The first page of up to `limit` items.
    pub fn first(limit: u32) -> Self {
        PageRequest { after: None, limit }
    }

    /// The page of up to `limit` items after `after`.
    pub fn after(after: C, limit: u32) -> Self {
        PageRequest {
            after: Some(after),
            limit,
        }
    }

    /// Whether `limit` is within `1..=`[`MAX_PAGE_SIZE`], the one bound every listing keeps.
    pub fn limit_is_valid(&self) -> bool {
        (1..=MAX_PAGE_SIZE).contains(&self.limit)
    }
}

impl<C> Default for PageRequest<C> {
    /// The first page of [`DEFAULT_PAGE_SIZE`] items.
    fn default() -> Self {
        PageRequest::first(DEFAULT_PAGE_SIZE)
    }
}

/// An item of a keyset listing: where it stands in the listing's order, and the name its
/// list takes in a page's JSON.
pub trait PageItem {
    /// The key of the listing's order, from which the next page starts.
    type Cursor;

    /// The name of the item list in a page's JSON (`"holds"`, `"slots"`).
    const FIELD: &'static str;

    /// The cursor just after this item.
    fn cursor(&self) -> Self::Cursor;
}

impl PageItem for Hold {
    type Cursor = HoldId;
    const FIELD: &'static str = "holds";

    fn cursor(&self) -> HoldId {
        self.hold_id
    }
}

impl PageItem for SlotSummary {
    type Cursor = SlotCursor;
    const FIELD: &'static str = "slots";

    fn cursor(&self) -> SlotCursor {
        SlotCursor {
            starts_at: self.starts_at,
            slot_id: self.slot_id,
        }
    }
}

/// One page of a keyset listing. In JSON: `{"<items' name>": [...], "next_after": cursor}`
/// (`{"holds": [...]}` for holds, `{"slots": [...]}` for slots).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T: PageItem> {
    /// The items, in the listing's order.
    pub items: Vec<T>,
    /// Where the next page starts ([`PageRequest::after`]) when this one was full; `None` when
    /// there is nothing after it.
    pub next_after: Option<T::Cursor>,
}

impl<T: PageItem> Page<T> {
    /// The page `items` make as the answer to a request for `limit`: a full page says where
    /// the next one starts, a shorter one is the last.
    pub fn of(items: Vec<T>, limit: u32) -> Self {
        let full = items.len() >= limit as usize;
        Page {
            next_after: items.last().filter(|_| full).map(T::cursor),
            items,
        }
    }
}

/// A page of holds, by id, each with its status resolved at the time of the read.
pub type HoldPage = Page<Hold>;

/// A page of the operator's slot listing.
pub type SlotPage = Page<SlotSummary>;

impl<T> Serialize for Page<T>
where
    T: PageItem + Serialize,
    T::Cursor: Serialize,
{
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry(T::FIELD, &self.items)?;
        map.serialize_entry("next_after", &self.next_after)?;
        map.end()
    }
}

impl<'de, T> Deserialize<'de> for Page<T>
where
    T: PageItem + Deserialize<'de>,
    T::Cursor: Deserialize<'de>,
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct PageVisitor<T>(PhantomData<T>);

        impl<'de, T> Visitor<'de> for PageVisitor<T>
        where
            T: PageItem + Deserialize<'de>,
            T::Cursor: Deserialize<'de>,
        {
            type Value = Page<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(
                    f,
                    "a page: {{\"{}\": [...], \"next_after\": ...}}",
                    T::FIELD
                )
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Page<T>, A::Error> {
                let (mut items, mut next_after) = (None, None);
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    if key == T::FIELD {
                        items = Some(map.next_value()?);
                    } else if key == "next_after" {
                        next_after = Some(map.next_value()?);
                    } else {
                        map.next_value::<de::IgnoredAny>()?;
                    }
                }
                Ok(Page {
                    items: items.ok_or_else(|| de::Error::missing_field(T::FIELD))?,
                    next_after: next_after.unwrap_or(None),
                })
            }
        }

        deserializer.deserialize_map(PageVisitor(PhantomData))
    }
}

/// Where a page of the operator's listing starts: after the slot with this `starts_at` and id
/// (the listing's order). Written `<microseconds since the epoch>_<slot id>` as text, for URLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotCursor {
    /// The last listed slot's start.
    pub starts_at: Timestamp,
    /// The last listed slot's id.
    pub slot_id: SlotId,
}

impl SlotCursor {
    /// The cursor just after `slot`.
    pub fn after(slot: &super::slot::Slot) -> Self {
        SlotCursor {
            starts_at: slot.starts_at,
            slot_id: slot.slot_id,
        }
    }
}

impl fmt::Display for SlotCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.starts_at.timestamp_micros(), self.slot_id)
    }
}

/// A string that is not a [`SlotCursor`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a slot cursor is `<microseconds>_<slot id>`, got {0:?}")]
pub struct InvalidSlotCursor(pub String);

impl FromStr for SlotCursor {
    type Err = InvalidSlotCursor;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || InvalidSlotCursor(s.to_owned());
        let (micros, id) = s.split_once('_').ok_or_else(invalid)?;
        let signed = micros.strip_prefix('-').unwrap_or(micros);
        if signed.is_empty() || !signed.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        let micros: i64 = micros.parse().map_err(|_| invalid())?;
        let starts_at = chrono::DateTime::from_timestamp_micros(micros).ok_or_else(invalid)?;
        let slot_id = id.parse::<SlotId>().map_err(|_| invalid())?;
        Ok(SlotCursor { starts_at, slot_id })
    }
}

impl Serialize for SlotCursor {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for SlotCursor {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}
