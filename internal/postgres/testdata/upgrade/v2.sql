--
-- PostgreSQL database dump
--

\restrict edQmyf8Nxg487V8H2GUQgb9bBVVwqweeKDoeaDbrRy24AURET4T1aIeLX1hssg1

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

INSERT INTO public.plants (id, name, tag, created_at) VALUES (1, 'Monstera deliciosa', 'tropical', '2026-11-23 19:37:27.3741+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (3, 'Fern', '', '2026-11-23 19:37:27.398409+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (-7, 'Negative id', 'edge', '2026-11-23 19:37:27.439635+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (9223372036854775807, 'Largest id', 'edge', '2026-11-23 19:37:27.453641+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (-9223372036854775808, 'Smallest id', NULL, '2026-11-23 19:37:27.467343+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (2, 'Snake plant', 'shade', '2026-11-23 19:37:27.386958+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (4, 'Ficus elastica', NULL, '2026-11-23 19:37:27.411972+00');


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.schema_migrations (version, name, applied_at) VALUES (1, '0001_init.sql', '2026-11-23 19:37:27.221646+00');
INSERT INTO public.schema_migrations (version, name, applied_at) VALUES (2, '0002_webhooks.sql', '2026-11-23 19:37:27.23265+00');


--
-- Data for Name: tokens; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (3, 'fixture-rotated', '\xd261983061202e2624201460514ab6ad2afcc69c322631d5502380bae3feaa1a', 'plants:write', '2026-11-23 19:37:27.270458+00', NULL, '2026-11-23 19:37:27.287272+00');
INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (4, 'fixture-rotated', '\xa3b926cbe11ca5266cf6decd9fa699aaa785e52f397aad5cdab9d1bfa1767572', 'plants:read plants:write', '2026-11-23 19:37:27.305852+00', NULL, NULL);
INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (1, 'fixture-admin', '\x30e7963a9e2bc096474a05be553e5e0601554cc437ca1d3ab256b228fc8873a1', 'plants:read plants:write', '2026-11-23 19:37:27.234744+00', '2026-11-23 19:37:27.540488+00', NULL);
INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (2, 'fixture-reader', '\x9984406d1ebedb667509d14418efc1a250d68ba37bc0779ddb551a52181dcbf6', 'plants:read', '2026-11-23 19:37:27.250943+00', '2026-11-23 19:37:27.527359+00', NULL);


--
-- Data for Name: webhook_deliveries; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: webhook_subscribers; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Name: tokens_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.tokens_id_seq', 4, true);


--
-- Name: webhook_deliveries_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.webhook_deliveries_id_seq', 1, false);


--
-- Name: webhook_subscribers_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.webhook_subscribers_id_seq', 1, false);


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

\unrestrict edQmyf8Nxg487V8H2GUQgb9bBVVwqweeKDoeaDbrRy24AURET4T1aIeLX1hssg1

