--
-- PostgreSQL database dump
--

\restrict x77qsGNCXP2LvMEBNqMwGIRVNtge6mBexhCAHDLmh2u58iVtvHkyNntwTJB3gRi

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: event_counter; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.event_counter (
    last bigint NOT NULL
);


--
-- Name: event_horizon; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.event_horizon (
    pruned_through bigint NOT NULL
);


--
-- Name: events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.events (
    id bigint NOT NULL,
    type text NOT NULL,
    plant_id bigint NOT NULL,
    name text NOT NULL,
    tag text,
    at timestamp with time zone NOT NULL
);


--
-- Name: plants; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.plants (
    id bigint NOT NULL,
    name text NOT NULL,
    tag text COLLATE pg_catalog."C",
    created_at timestamp with time zone NOT NULL
);


--
-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone NOT NULL
);


--
-- Name: tokens; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.tokens (
    id bigint NOT NULL,
    name text NOT NULL COLLATE pg_catalog."C",
    hash bytea NOT NULL,
    scopes text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    last_used_at timestamp with time zone,
    revoked_at timestamp with time zone
);


--
-- Name: tokens_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.tokens ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.tokens_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: webhook_deliveries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_deliveries (
    id bigint NOT NULL,
    subscriber_id bigint NOT NULL,
    event_id text NOT NULL,
    plant_id bigint NOT NULL,
    name text NOT NULL,
    tag text,
    created_at timestamp with time zone NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone NOT NULL,
    last_status integer,
    last_error text,
    failed_at timestamp with time zone,
    event_type text,
    event_seq bigint,
    first_failed_at timestamp with time zone
);


--
-- Name: webhook_deliveries_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.webhook_deliveries ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.webhook_deliveries_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: webhook_subscriber_errors; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_subscriber_errors (
    subscriber_id bigint NOT NULL,
    last_error_at timestamp with time zone NOT NULL
);


--
-- Name: webhook_subscriber_events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_subscriber_events (
    subscriber_id bigint NOT NULL,
    created boolean NOT NULL,
    updated boolean NOT NULL,
    deleted boolean NOT NULL
);


--
-- Name: webhook_subscribers; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_subscribers (
    id bigint NOT NULL,
    url text NOT NULL,
    secret text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    disabled_at timestamp with time zone,
    disabled_reason text,
    delivered bigint DEFAULT 0 NOT NULL,
    last_error text,
    lease_owner text,
    lease_until timestamp with time zone
);


--
-- Name: webhook_subscribers_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.webhook_subscribers ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.webhook_subscribers_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Data for Name: event_counter; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.event_counter (last) VALUES (11);


--
-- Data for Name: event_horizon; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.event_horizon (pruned_through) VALUES (0);


--
-- Data for Name: events; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.events (id, type, plant_id, name, tag, at) VALUES (1, 'plant.created', 1, 'Monstera deliciosa', 'tropical', '2026-11-28 01:25:23.755534+00');
INSERT INTO public.events (id, type, plant_id, name, tag, at) VALUES (2, 'plant.created', 2, 'Sansevieria', NULL, '2026-11-28 01:25:23.776554+00');
INSERT INTO public.events (id, type, plant_id, name, tag, at) VALUES (3, 'plant.created', 3, 'Fern', '', '2026-11-28 01:25:23.788836+00');
INSERT INTO public.events (id, type, plant_id, name, tag, at) VALUES (4, 'plant.created', 4, 'Ficus élastica 🌿', 'tropical', '2026-11-28 01:25:23.800729+00');
INSERT INTO public.events (id, type, plant_id, name, tag, at) VALUES (5, 'plant.created', 5, 'Aloe vera', 'succulent', '2026-11-28 01:25:23.815128+00');
INSERT INTO public.events (id, type, plant_id, name, tag, at) VALUES (6, 'plant.created', -7, 'Negative id', 'edge', '2026-11-28 01:25:23.837727+00');
INSERT INTO public.events (id, type, plant_id, name, tag, at) VALUES (7, 'plant.created', 9223372036854775807, 'Largest id', 'edge', '2026-11-28 01:25:23.856799+00');
INSERT INTO public.events (id, type, plant_id, name, tag, at) VALUES (8, 'plant.created', -9223372036854775808, 'Smallest id', NULL, '2026-11-28 01:25:23.871003+00');
INSERT INTO public.events (id, type, plant_id, name, tag, at) VALUES (9, 'plant.updated', 2, 'Snake plant', 'shade', '2026-11-28 01:25:23.889226+00');
INSERT INTO public.events (id, type, plant_id, name, tag, at) VALUES (10, 'plant.updated', 4, 'Ficus elastica', NULL, '2026-11-28 01:25:23.901809+00');
INSERT INTO public.events (id, type, plant_id, name, tag, at) VALUES (11, 'plant.deleted', 5, 'Aloe vera', 'succulent', '2026-11-28 01:25:23.914032+00');


--
-- Data for Name: plants; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.plants (id, name, tag, created_at) VALUES (1, 'Monstera deliciosa', 'tropical', '2026-11-28 01:25:23.755534+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (3, 'Fern', '', '2026-11-28 01:25:23.788836+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (-7, 'Negative id', 'edge', '2026-11-28 01:25:23.837727+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (9223372036854775807, 'Largest id', 'edge', '2026-11-28 01:25:23.856799+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (-9223372036854775808, 'Smallest id', NULL, '2026-11-28 01:25:23.871003+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (2, 'Snake plant', 'shade', '2026-11-28 01:25:23.776554+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (4, 'Ficus elastica', NULL, '2026-11-28 01:25:23.800729+00');


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.schema_migrations (version, name, applied_at) VALUES (1, '0001_init.sql', '2026-11-28 01:25:23.384179+00');
INSERT INTO public.schema_migrations (version, name, applied_at) VALUES (2, '0002_webhooks.sql', '2026-11-28 01:25:23.402519+00');
INSERT INTO public.schema_migrations (version, name, applied_at) VALUES (3, '0003_events.sql', '2026-11-28 01:25:23.411063+00');
INSERT INTO public.schema_migrations (version, name, applied_at) VALUES (4, '0004_webhook_errors.sql', '2026-11-28 01:25:23.415805+00');
INSERT INTO public.schema_migrations (version, name, applied_at) VALUES (5, '0005_webhook_events.sql', '2026-11-28 01:25:23.422876+00');


--
-- Data for Name: tokens; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (3, 'fixture-rotated', '\x8b18f27734d535d22c1e507e8580195282217ed25138a3cd412326ffb595c0bc', 'plants:write', '2026-11-28 01:25:23.477465+00', NULL, '2026-11-28 01:25:23.503905+00');
INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (4, 'fixture-rotated', '\x1713b4c63bc9df32336cb5e7f88d1a7cb38bb0e224ab175d54ae90315c2cf52e', 'plants:read plants:write', '2026-11-28 01:25:23.534835+00', NULL, NULL);
INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (1, 'fixture-admin', '\xd54ee052d0399ce4a4c962484728522b6e00ca450f0bd41e64ad77c78a5bebd5', 'plants:read plants:write', '2026-11-28 01:25:23.425362+00', '2026-11-28 01:25:23.943996+00', NULL);
INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (2, 'fixture-reader', '\x3ba1283963e4ba70ac8770837f6560bd9a9435392e50af08b77b9ac2498f9e77', 'plants:read', '2026-11-28 01:25:23.451624+00', '2026-11-28 01:25:23.925988+00', NULL);


--
-- Data for Name: webhook_deliveries; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at, event_type, event_seq, first_failed_at) OVERRIDING SYSTEM VALUE VALUES (1, 1, 'msg_0c0908n8etjem89ne7tn73vc0r', 1, 'Monstera deliciosa', 'tropical', '2026-11-28 01:25:23.755534+00', 1, '2026-11-28 01:25:28.19368+00', NULL, 'send webhook msg_0c0908n8etjem89ne7tn73vc0r: Post: dial tcp: lookup hooks.invalid on 10.255.255.53:53: no such host', NULL, NULL, 1, '2026-11-28 01:25:23.813249+00');
INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at, event_type, event_seq, first_failed_at) OVERRIDING SYSTEM VALUE VALUES (5, 1, 'msg_7qqsa5kahsjv9twwrn8cyk3cn8', 5, 'Aloe vera', 'succulent', '2026-11-28 01:25:23.815128+00', 1, '2026-11-28 01:25:28.850421+00', NULL, 'send webhook msg_7qqsa5kahsjv9twwrn8cyk3cn8: Post: dial tcp: lookup hooks.invalid on 10.255.255.53:53: no such host', NULL, NULL, 5, '2026-11-28 01:25:23.870829+00');
INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at, event_type, event_seq, first_failed_at) OVERRIDING SYSTEM VALUE VALUES (3, 1, 'msg_1fm26whkx2amtej7fgr30fan1w', 3, 'Fern', '', '2026-11-28 01:25:23.788836+00', 1, '2026-11-28 01:25:29.673959+00', NULL, 'send webhook msg_1fm26whkx2amtej7fgr30fan1w: Post: dial tcp: lookup hooks.invalid on 10.255.255.53:53: no such host', NULL, NULL, 3, '2026-11-28 01:25:23.870829+00');
INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at, event_type, event_seq, first_failed_at) OVERRIDING SYSTEM VALUE VALUES (2, 1, 'msg_c78scsmendrqv5zer3q1nzpya4', 2, 'Sansevieria', NULL, '2026-11-28 01:25:23.776554+00', 1, '2026-11-28 01:25:27.915215+00', NULL, 'send webhook msg_c78scsmendrqv5zer3q1nzpya4: Post: dial tcp: lookup hooks.invalid on 10.255.255.53:53: no such host', NULL, NULL, 2, '2026-11-28 01:25:23.870829+00');
INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at, event_type, event_seq, first_failed_at) OVERRIDING SYSTEM VALUE VALUES (4, 1, 'msg_a6201pmxepnfwbg4z5naw4m00r', 4, 'Ficus élastica 🌿', 'tropical', '2026-11-28 01:25:23.800729+00', 1, '2026-11-28 01:25:29.657071+00', NULL, 'send webhook msg_a6201pmxepnfwbg4z5naw4m00r: Post: dial tcp: lookup hooks.invalid on 10.255.255.53:53: no such host', NULL, NULL, 4, '2026-11-28 01:25:23.870829+00');
INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at, event_type, event_seq, first_failed_at) OVERRIDING SYSTEM VALUE VALUES (8, 1, 'msg_nf3esx707s6evdh3nfpcrb4ytm', -9223372036854775808, 'Smallest id', NULL, '2026-11-28 01:25:23.871003+00', 1, '2026-11-28 01:25:28.408573+00', NULL, 'send webhook msg_nf3esx707s6evdh3nfpcrb4ytm: Post: dial tcp: lookup hooks.invalid on 10.255.255.53:53: no such host', NULL, NULL, 8, '2026-11-28 01:25:23.926768+00');
INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at, event_type, event_seq, first_failed_at) OVERRIDING SYSTEM VALUE VALUES (6, 1, 'msg_0jajk8rpe1gyma4qs8edvv7r48', -7, 'Negative id', 'edge', '2026-11-28 01:25:23.837727+00', 1, '2026-11-28 01:25:29.50054+00', NULL, 'send webhook msg_0jajk8rpe1gyma4qs8edvv7r48: Post: dial tcp: lookup hooks.invalid on 10.255.255.53:53: no such host', NULL, NULL, 6, '2026-11-28 01:25:23.926768+00');
INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at, event_type, event_seq, first_failed_at) OVERRIDING SYSTEM VALUE VALUES (7, 1, 'msg_nmhch1y1wdhtkcbpmw7p63e7sg', 9223372036854775807, 'Largest id', 'edge', '2026-11-28 01:25:23.856799+00', 1, '2026-11-28 01:25:28.403621+00', NULL, 'send webhook msg_nmhch1y1wdhtkcbpmw7p63e7sg: Post: dial tcp: lookup hooks.invalid on 10.255.255.53:53: no such host', NULL, NULL, 7, '2026-11-28 01:25:23.926768+00');


--
-- Data for Name: webhook_subscriber_errors; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.webhook_subscriber_errors (subscriber_id, last_error_at) VALUES (1, '2026-11-28 01:25:23.926768+00');


--
-- Data for Name: webhook_subscriber_events; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: webhook_subscribers; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.webhook_subscribers (id, url, secret, created_at, disabled_at, disabled_reason, delivered, last_error, lease_owner, lease_until) OVERRIDING SYSTEM VALUE VALUES (1, 'https://hooks.invalid/plants', 'whsec_SHn6QxuDK/3Zq6LEcoPjiz8fpu6lEFCaA3ovjNq/+2Q=', '2026-11-28 01:25:23.613349+00', NULL, NULL, 0, 'send webhook msg_nmhch1y1wdhtkcbpmw7p63e7sg: Post: dial tcp: lookup hooks.invalid on 10.255.255.53:53: no such host', NULL, '2026-11-28 01:25:23.934605+00');


--
-- Name: tokens_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.tokens_id_seq', 4, true);


--
-- Name: webhook_deliveries_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.webhook_deliveries_id_seq', 8, true);


--
-- Name: webhook_subscribers_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.webhook_subscribers_id_seq', 1, true);


--
-- Name: events events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (id);


--
-- Name: plants plants_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.plants
    ADD CONSTRAINT plants_pkey PRIMARY KEY (id);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: tokens tokens_hash_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tokens
    ADD CONSTRAINT tokens_hash_key UNIQUE (hash);


--
-- Name: tokens tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tokens
    ADD CONSTRAINT tokens_pkey PRIMARY KEY (id);


--
-- Name: webhook_deliveries webhook_deliveries_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (id);


--
-- Name: webhook_subscriber_errors webhook_subscriber_errors_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_subscriber_errors
    ADD CONSTRAINT webhook_subscriber_errors_pkey PRIMARY KEY (subscriber_id);


--
-- Name: webhook_subscriber_events webhook_subscriber_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_subscriber_events
    ADD CONSTRAINT webhook_subscriber_events_pkey PRIMARY KEY (subscriber_id);


--
-- Name: webhook_subscribers webhook_subscribers_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_subscribers
    ADD CONSTRAINT webhook_subscribers_pkey PRIMARY KEY (id);


--
-- Name: plants_by_tag; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX plants_by_tag ON public.plants USING btree (tag, id);


--
-- Name: tokens_active_name; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX tokens_active_name ON public.tokens USING btree (name) WHERE (revoked_at IS NULL);


--
-- Name: webhook_deliveries_failed; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_deliveries_failed ON public.webhook_deliveries USING btree (subscriber_id) WHERE (failed_at IS NOT NULL);


--
-- Name: webhook_deliveries_pending; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_deliveries_pending ON public.webhook_deliveries USING btree (subscriber_id, id) WHERE (failed_at IS NULL);


--
-- Name: webhook_deliveries_waiting; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_deliveries_waiting ON public.webhook_deliveries USING btree (subscriber_id, plant_id, id) WHERE ((failed_at IS NULL) AND (attempts > 0));


--
-- Name: webhook_deliveries webhook_deliveries_subscriber_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_subscriber_id_fkey FOREIGN KEY (subscriber_id) REFERENCES public.webhook_subscribers(id) ON DELETE CASCADE;


--
-- Name: webhook_subscriber_errors webhook_subscriber_errors_subscriber_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_subscriber_errors
    ADD CONSTRAINT webhook_subscriber_errors_subscriber_id_fkey FOREIGN KEY (subscriber_id) REFERENCES public.webhook_subscribers(id) ON DELETE CASCADE;


--
-- Name: webhook_subscriber_events webhook_subscriber_events_subscriber_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_subscriber_events
    ADD CONSTRAINT webhook_subscriber_events_subscriber_id_fkey FOREIGN KEY (subscriber_id) REFERENCES public.webhook_subscribers(id) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--

\unrestrict x77qsGNCXP2LvMEBNqMwGIRVNtge6mBexhCAHDLmh2u58iVtvHkyNntwTJB3gRi

