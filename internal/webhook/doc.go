// Package webhook holds the sending side of our webhooks, which follow the
// Standard Webhooks specification (https://www.standardwebhooks.com): how a
// message is signed, the HTTP client that may carry it (one that refuses to
// connect to internal addresses), one delivery attempt, and the schedule of
// retries. It keeps no state: the outbox and the loop that drains it live
// elsewhere and call Send and Schedule.Next.
package webhook
