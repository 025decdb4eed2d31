--
-- PostgreSQL database dump
--

\restrict bnVwbtFxydZKc5PeqlxfJsBKoKFJNSqyF7nUx7GBXRc3WMcEXInjiTLIQoB6z3L

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
    failed_at timestamp with time zone
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
-- Data for Name: plants; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.plants (id, name, tag, created_at) VALUES (1, 'Monstera deliciosa', 'tropical', '2026-11-23 21:24:15.942877+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (3, 'Fern', '', '2026-11-23 21:24:15.990124+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (-7, 'Negative id', 'edge', '2026-11-23 21:24:16.083568+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (9223372036854775807, 'Largest id', 'edge', '2026-11-23 21:24:16.100605+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (-9223372036854775808, 'Smallest id', NULL, '2026-11-23 21:24:16.123671+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (2, 'Snake plant', 'shade', '2026-11-23 21:24:15.973913+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (4, 'Ficus elastica', NULL, '2026-11-23 21:24:16.036012+00');


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.schema_migrations (version, name, applied_at) VALUES (1, '0001_init.sql', '2026-11-23 21:24:15.427449+00');
INSERT INTO public.schema_migrations (version, name, applied_at) VALUES (2, '0002_webhooks.sql', '2026-11-23 21:24:15.46034+00');


--
-- Data for Name: tokens; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (3, 'fixture-rotated', '\x12bee39aeac38cd64e4fa6a9a88ff9aa902f336d757ce415b73411b466a4e03b', 'plants:write', '2026-11-23 21:24:15.555201+00', NULL, '2026-11-23 21:24:15.607644+00');
INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (4, 'fixture-rotated', '\xc1710802b6cc8d2abb254c33bc0d008db79c20957926a6530e8dbfcca27f184c', 'plants:read plants:write', '2026-11-23 21:24:15.652844+00', NULL, NULL);
INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (1, 'fixture-admin', '\xa587a683c9f18891111cd3f9ba950fd142a3830431ec7792fb35fe90b70fb258', 'plants:read plants:write', '2026-11-23 21:24:15.463688+00', '2026-11-23 21:24:16.263562+00', NULL);
INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (2, 'fixture-reader', '\xe7d529c5a2ecf767991274243d1c6b598288cda1778a86461cb15bb5c7ff702a', 'plants:read', '2026-11-23 21:24:15.517932+00', '2026-11-23 21:24:16.248023+00', NULL);


--
-- Data for Name: webhook_deliveries; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at) OVERRIDING SYSTEM VALUE VALUES (1, 1, 'msg_ybrxj4wt034g9wvx6d2gxa20ww', 1, 'Monstera deliciosa', 'tropical', '2026-11-23 21:24:15.942877+00', 1, '2026-11-23 21:24:21.059088+00', NULL, 'send webhook msg_ybrxj4wt034g9wvx6d2gxa20ww: Post: dial tcp: lookup hooks.invalid on 10.255.255.53:53: no such host', NULL);
INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at) OVERRIDING SYSTEM VALUE VALUES (2, 1, 'msg_tct0e8t257mj6eevgsse9aykc8', 2, 'Sansevieria', NULL, '2026-11-23 21:24:15.973913+00', 0, '2026-11-23 21:24:15.973913+00', NULL, NULL, NULL);
INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at) OVERRIDING SYSTEM VALUE VALUES (3, 1, 'msg_ywkqy4n4knke4wgjfhsaxsbfcm', 3, 'Fern', '', '2026-11-23 21:24:15.990124+00', 0, '2026-11-23 21:24:15.990124+00', NULL, NULL, NULL);
INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at) OVERRIDING SYSTEM VALUE VALUES (4, 1, 'msg_5q7640swjpwfyfahxg27pkaakw', 4, 'Ficus élastica 🌿', 'tropical', '2026-11-23 21:24:16.036012+00', 0, '2026-11-23 21:24:16.036012+00', NULL, NULL, NULL);
INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at) OVERRIDING SYSTEM VALUE VALUES (5, 1, 'msg_tzsatk6bb9xz730dq41wbmg4tg', 5, 'Aloe vera', 'succulent', '2026-11-23 21:24:16.057183+00', 0, '2026-11-23 21:24:16.057183+00', NULL, NULL, NULL);
INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at) OVERRIDING SYSTEM VALUE VALUES (6, 1, 'msg_09f6vxnfx1ja7qdgvvhdyygjnc', -7, 'Negative id', 'edge', '2026-11-23 21:24:16.083568+00', 0, '2026-11-23 21:24:16.083568+00', NULL, NULL, NULL);
INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at) OVERRIDING SYSTEM VALUE VALUES (7, 1, 'msg_9dagy9dztxpdk26qcfb0sj3y84', 9223372036854775807, 'Largest id', 'edge', '2026-11-23 21:24:16.100605+00', 0, '2026-11-23 21:24:16.100605+00', NULL, NULL, NULL);
INSERT INTO public.webhook_deliveries (id, subscriber_id, event_id, plant_id, name, tag, created_at, attempts, next_attempt_at, last_status, last_error, failed_at) OVERRIDING SYSTEM VALUE VALUES (8, 1, 'msg_6nb4hcqtkpj63cwk57qak0swzm', -9223372036854775808, 'Smallest id', NULL, '2026-11-23 21:24:16.123671+00', 0, '2026-11-23 21:24:16.123671+00', NULL, NULL, NULL);


--
-- Data for Name: webhook_subscribers; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.webhook_subscribers (id, url, secret, created_at, disabled_at, disabled_reason, delivered, last_error, lease_owner, lease_until) OVERRIDING SYSTEM VALUE VALUES (1, 'https://hooks.invalid/plants', 'whsec_Jxkzn95Gs9QmbgF9Su9mlUOYYQNvCO4epgF8FTSdYl0=', '2026-11-23 21:24:15.785867+00', NULL, NULL, 0, 'send webhook msg_ybrxj4wt034g9wvx6d2gxa20ww: Post: dial tcp: lookup hooks.invalid on 10.255.255.53:53: no such host', NULL, NULL);


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
-- Name: webhook_deliveries webhook_deliveries_subscriber_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_subscriber_id_fkey FOREIGN KEY (subscriber_id) REFERENCES public.webhook_subscribers(id) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--

\unrestrict bnVwbtFxydZKc5PeqlxfJsBKoKFJNSqyF7nUx7GBXRc3WMcEXInjiTLIQoB6z3L

