// Package succession decides who holds a role, who challenges for it and who
// waits, for the Kafka-coordinated election backend (docs/design.md,
// "Succession (Kafka backend)").
//
// Everything here is a pure function of (state, member, now, config): it does
// no I/O, reads no clock, never sleeps and starts no goroutines. The transport
// folds the coordination topic into a [RoleState] with [FoldRecords], asks
// [Evaluate] what one member should do at one instant, performs the answer and
// asks again. A test therefore drives a whole failover with a fake clock and no
// broker.
//
// # The coordination topic
//
// One compacted topic with a single partition holds, per role, one
// registration record per member and one lease record:
//
//	key  "reg/<role>/<member>"  value "reg v1 <role> <member>"                  (nil: deregistration)
//	key  "lease/<role>"         value "lease v1 <role> <holder> <deadline_ms>"  (nil: lease released)
//
// Role and member IDs are path-escaped ([url.PathEscape]) in keys and values,
// so any byte string round-trips and a "/" or " " inside an ID is never
// ambiguous. [RegistrationRecord], [DeregistrationKey], [LeaseRecord] and
// [LeaseKey] build them.
//
// # Ranks
//
// A member registers by appending a registration record; the record's offset
// is its join sequence, so the roster is the registered members in offset
// order. Compaction keeps offsets, so replaying the partition reproduces the
// ranks. A recovered member registers again, gets a higher offset and lands at
// the tail: there is no failback, and no counter and no coordinator to keep.
//
// The member named by the lease, live or expired, is rank 0 while it is
// registered; everyone else follows in offset order. Without a registered
// holder, rank is simply the position in offset order.
//
// # Decisions
//
// [Evaluate] applies these rules, in this order:
//
//   - not in the roster: [NotRegistered];
//   - named by a live lease (now < deadline): [Hold], with the instant at which
//     to renew;
//   - rank n, now at or past the member's anchor: [Challenge]. The anchor is
//     the lease's deadline + n × stagger when there is a lease, live or
//     expired; with no lease at all it is the member's own registration
//     instant + n × stagger;
//   - otherwise [Wait] until the anchor, which is exactly the earliest instant
//     at which the answer can change without a new record.
//
// So when the holder dies (stops renewing), rank 1 challenges at deadline +
// 1 stagger; rank 2 challenges one stagger later only if rank 1 has not taken
// over, because rank 1's new lease record moves everybody's anchor to the new
// deadline. The holder of an expired lease keeps rank 0 and reclaims its own
// role at its own deadline (deadline + 0 × stagger), ahead of every challenger.
//
// # With no lease at all
//
// Before the first grant, or after a release, rank n's anchor is its own
// registration instant + n × stagger; we chose not to
// anchor everyone at a common instant (the first registration, say). The
// consequences, which are deliberate:
//
//   - The instant is the record's timestamp, so it is the same for every
//     member that replays the log. With LogAppendTime the timestamps do not
//     decrease with the offset (short of a new partition leader with a slower
//     clock), so rank n's anchor is at least one stagger after rank n-1's;
//     with CreateTime a member with a fast clock may go
//     before a lower rank, which costs an epoch and nothing else.
//   - A member that registers again (after a restart) takes its new instant:
//     it moves to the tail and cannot challenge on the strength of an old
//     registration.
//   - Registration instants of a running cluster are usually long past, so
//     after a release every registered member challenges at once. A holder
//     that wants to hand over one stagger at a time deregisters and writes a
//     lease whose deadline is now instead of releasing.
//
// # Why the anchor never comes from now
//
// An anchor of now + n × stagger moves forward on every evaluation: a standby
// that re-evaluates before the instant it was told would be told a later one,
// and would wait for ever. Anchors come from the records alone (a deadline, a
// registration timestamp), so every member computes the same instants from the
// same log, a Wait's instant does not move while the state is unchanged, and
// evaluating early or late, once or a thousand times, gives the same answer.
// Only [Hold]'s renewal instant looks at now, and only to never point into the
// past.
//
// # Safety
//
// The stagger only saves epoch churn. Safety comes from the producer epoch
// alone: InitProducerId is atomic, so if every standby challenges at once
// (stagger 0, a released lease, skewed timestamps) exactly one ends with the
// newest epoch and the others learn on their first guarded write that they
// lost. Nothing in this package has to be exact for the role to stay single.
package succession
