//! Every conformance case as a function taking a fresh store, for running one case by hand.
//! [`conformance_tests!`](crate::conformance_tests) runs them all.
//!
//! The cases are grouped by the part of the store contract they exercise, each group with its
//! one list: the lifecycle (slots, availability, holds, owners, quantities, lifetimes, their
//! races and faults), the queries (an owner's holds, a slot's roster) and the administration
//! (capacity, closing, removal, the operator's listing, their races). A body is reachable only
//! through the public function its group's list generates here: a body missing from its list
//! is dead code, which CI refuses (`-D warnings`).

mod admin;
mod admin_races;
mod availability;
mod booking_events;
mod bookings;
mod candidates;
mod capacity;
mod lifecycle;
mod lifetimes;
mod owners;
mod pool_waitlists;
mod pools;
mod quantities;
mod queries;
mod races;
mod resilience;
mod waitlists;

/// Every case body, by name, for the public functions below.
mod bodies {
    pub(super) use super::admin::*;
    pub(super) use super::admin_races::*;
    pub(super) use super::availability::*;
    pub(super) use super::booking_events::*;
    pub(super) use super::bookings::*;
    pub(super) use super::candidates::*;
    pub(super) use super::capacity::*;
    pub(super) use super::lifecycle::*;
    pub(super) use super::lifetimes::*;
    pub(super) use super::owners::*;
    pub(super) use super::pool_waitlists::*;
    pub(super) use super::pools::*;
    pub(super) use super::quantities::*;
    pub(super) use super::queries::*;
    pub(super) use super::races::*;
    pub(super) use super::resilience::*;
    pub(super) use super::waitlists::*;
}

/// The lifecycle cases (files `lifecycle`, `availability`, `owners`, `quantities`, `lifetimes`,
/// `races` and `resilience` of [`cases`](crate::conformance::cases)): what any store must do to
/// create slots, list availability and place, confirm, cancel, renew and read holds.
/// [`conformance_tests!`](crate::conformance_tests) makes a `#[test]` of each. Not part of the
/// API.
#[doc(hidden)]
#[macro_export]
macro_rules! __lifecycle_case_list {
    ($callback:path; $($args:tt)*) => {
        $callback! { $($args)*;
            hold_creates_a_held_hold_reserving_one_unit
            hold_replay_returns_the_current_state_and_reserves_nothing
            hold_replay_wins_over_sold_out_and_closed
            hold_key_reused_on_another_slot_changes_nothing
            hold_on_unknown_slot_is_slot_not_found
            hold_on_started_slot_is_slot_closed
            hold_on_full_slot_is_sold_out_and_reserves_nothing
            hold_with_invalid_key_is_refused
            confirm_an_active_hold
            confirm_is_idempotent
            confirm_a_cancelled_hold_fails
            confirm_fails_exactly_at_expires_at
            cancel_a_held_hold_returns_its_unit
            cancel_a_confirmed_hold_returns_its_unit
            cancel_is_idempotent
            cancel_an_expired_hold_fails
            unknown_holds_are_not_found
            expired_status_needs_no_cleanup
            expired_holds_are_reclaimed_when_the_slot_is_full
            availability_counts_expired_holds_as_free
            confirmed_holds_never_expire
            availability_lists_future_slots_in_order
            availability_query_narrows_by_starts_at
            invalid_slots_are_refused
            cancel_shows_in_cached_availability_at_once
            availability_narrows_by_resource
            race_holds_on_one_slot_take_exactly_its_capacity
            race_one_key_makes_one_hold
            race_reclaim_returns_each_expired_unit_once
            race_cancels_of_one_hold_return_one_unit
            race_mixed_operations_keep_the_invariant
            faults_never_break_the_invariant_or_hang_a_caller
            dropped_calls_leak_no_capacity
            owned_holds_answer_only_in_their_owners_scope
            a_key_replays_only_the_same_request
            a_key_of_another_owner_reveals_nothing
            keys_scoped_to_their_owner_let_owners_share_a_key
            a_hold_takes_its_quantity_all_or_nothing
            quantities_out_of_bounds_are_refused
            cancel_and_expiry_return_every_unit_of_a_hold
            a_refused_hold_reclaims_nothing
            race_multi_unit_holds_sell_whole_holds
            race_a_flash_sale_sells_every_unit_once
            renew_extends_an_active_hold_up_to_its_maximum_life
            renew_refuses_expired_and_cancelled_holds
            requested_lifetimes_are_bounded
            race_owners_touch_only_their_own_holds
            any_hold_takes_the_first_candidate_that_fits
            any_hold_refusal_names_every_candidate
            any_hold_replays_on_the_slot_it_took
            any_hold_strategies_spread_holds
            race_any_holds_never_take_a_unit_twice
        }
    };
}

/// The query cases (file `queries`): an owner's holds and a slot's roster in pages.
/// [`conformance_tests!`](crate::conformance_tests) makes a `#[test]` of each. Not part of the
/// API.
#[doc(hidden)]
#[macro_export]
macro_rules! __query_case_list {
    ($callback:path; $($args:tt)*) => {
        $callback! { $($args)*;
            owner_holds_and_rosters_page_by_id
        }
    };
}

/// The administration cases (files `admin` and `admin_races`): capacity changes, closing and
/// reopening, removal, the operator's listing, and their races.
/// [`conformance_tests!`](crate::conformance_tests) makes a `#[test]` of each. Not part of the
/// API.
#[doc(hidden)]
#[macro_export]
macro_rules! __admin_case_list {
    ($callback:path; $($args:tt)*) => {
        $callback! { $($args)*;
            raising_capacity_adds_free_units
            lowering_capacity_takes_only_free_units
            capacity_changes_are_validated
            closed_slots_refuse_new_holds_and_keep_their_holds
            removal_needs_a_slot_with_nothing_held_or_confirmed
            operator_listing_pages_every_slot_with_its_units
            slot_changes_show_in_cached_availability_at_once
            race_lowering_capacity_while_holds_race
            race_removal_never_strands_a_booking
            capacity_moves_by_units_and_by_compare_and_set
            race_capacity_moves_add_up
        }
    };
}

/// The booking cases (file `bookings`): several lines all or none, refusals naming every
/// line, whole-booking changes, replays, owners, expiry, validation and a race of overlapping
/// bookings. [`booking_conformance_tests!`](crate::booking_conformance_tests) makes a `#[test]`
/// of each. Not part of the API.
#[doc(hidden)]
#[macro_export]
macro_rules! __booking_case_list {
    ($callback:path; $($args:tt)*) => {
        $callback! { $($args)*;
            booking_takes_every_line_or_none
            booking_refusal_names_every_line
            booking_lines_change_together
            booking_replays_by_key_in_any_order
            booking_belongs_to_its_owner
            booking_expires_whole
            invalid_bookings_change_nothing
            race_overlapping_bookings_never_oversell
            bookings_show_in_the_cached_listing_at_once
            booking_keys_scoped_to_their_owner
        }
    };
}

/// The booking cases that read the event log (file `booking_events`).
/// [`booking_conformance_tests!`](crate::booking_conformance_tests)'s `events:` form makes a
/// `#[test]` of each. Not part of the API.
#[doc(hidden)]
#[macro_export]
macro_rules! __booking_event_case_list {
    ($callback:path; $($args:tt)*) => {
        $callback! { $($args)*;
            a_consumer_rebuilds_every_slots_units_from_events
            booking_line_events_carry_the_booking
        }
    };
}

/// The pool cases (file `pools`): capacities shared by several slots, taken and given back
/// with their slots' units, shown in availability, administered without selling a unit twice.
/// [`pool_conformance_tests!`](crate::pool_conformance_tests) makes a `#[test]` of each. Not
/// part of the API.
#[doc(hidden)]
#[macro_export]
macro_rules! __pool_case_list {
    ($callback:path; $($args:tt)*) => {
        $callback! { $($args)*;
            pool_caps_its_slots_together
            pool_refusal_takes_nothing
            pool_reclaims_expired_holds_of_its_slots
            every_short_pool_is_reclaimed
            attaching_and_detaching_move_the_slots_units
            pool_capacity_never_below_its_taken_units
            pool_changes_reclaim_only_what_makes_them_fit
            pools_show_in_the_cached_listing_at_once
            race_over_shared_pools_never_oversells
            pool_capacity_moves_by_units_and_by_compare_and_set
        }
    };
}

/// The waitlist cases (files `waitlists` and `pool_waitlists`): strict order, offers in the
/// freeing step, expiry to the next, priority, leaving, replays and refusals, pools' lines,
/// and races with newcomers.
/// [`waitlist_conformance_tests!`](crate::waitlist_conformance_tests) makes a `#[test]` of
/// each. Not part of the API.
#[doc(hidden)]
#[macro_export]
macro_rules! __waitlist_case_list {
    ($callback:path; $($args:tt)*) => {
        $callback! { $($args)*;
            waitlist_serves_freed_units_in_strict_order
            waitlist_offers_expire_to_the_next
            waitlist_orders_by_priority_and_can_be_left
            waitlist_joins_replay_and_refuse_like_holds
            race_waitlists_never_give_a_unit_to_a_newcomer
            pool_waitlist_serves_units_freed_on_another_slot
            pool_capacity_changes_and_detaches_serve_the_pool_line
            pool_line_skips_slots_that_stopped_selling
            race_pool_waitlists_never_give_a_unit_to_a_newcomer
        }
    };
}

/// A public function of each case a list names.
macro_rules! public_cases {
    ($bound:tt; $($case:ident)*) => {
        $(public_cases!(@one $bound $case);)*
    };
    (@one [$($bound:tt)*] $case:ident) => {
        #[doc = concat!("The case `", stringify!($case), "`.")]
        pub fn $case<S: $($bound)*>(store: S) -> impl std::future::Future<Output = ()> {
            bodies::$case(store)
        }
    };
}

crate::__lifecycle_case_list!(public_cases; [crate::store::HoldStore]);
crate::__query_case_list!(public_cases; [crate::store::HoldStore + crate::store::HoldQueries]);
crate::__admin_case_list!(public_cases; [crate::store::HoldStore + crate::store::SlotAdmin]);
crate::__booking_case_list!(public_cases; [crate::store::BookingStore + crate::store::SlotAdmin]);
crate::__pool_case_list!(public_cases; [crate::store::PoolStore + crate::store::BookingStore + crate::store::SlotAdmin]);
crate::__waitlist_case_list!(public_cases; [crate::store::WaitlistStore + crate::store::SlotAdmin + crate::store::EventStore + crate::store::PoolStore]);
crate::__booking_event_case_list!(public_cases; [crate::store::BookingStore + crate::store::SlotAdmin + crate::store::EventStore]);

/// [`check_hold_store`] from the lifecycle list.
macro_rules! lifecycle_check {
    (; $($case:ident)*) => {
        /// Runs every lifecycle case (what
        /// [`hold_store_conformance_tests!`](crate::hold_store_conformance_tests) makes a
        /// `#[test]` of each), one after another, each on a fresh store from `factory`:
        /// for a doc test or a `main`, where `#[test]` functions do not run.
        ///
        /// # Panics
        ///
        /// When a case fails, as the case does.
        pub fn check_hold_store<S, F, Fut>(factory: F)
        where
            S: crate::store::HoldStore,
            F: Fn() -> Fut,
            Fut: std::future::Future<Output = S>,
        {
            $(crate::conformance::run(&factory, $case);)*
        }
    };
}

crate::__lifecycle_case_list!(lifecycle_check;);
