--
-- PostgreSQL database dump
--

\restrict 7Sc8cIYzRGL19Fb9fwgA4Utdouvk4RnD3zTt8B9M8KSsm5YITKFNFhJfQmXGMZP

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
-- Data for Name: plants; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.plants (id, name, tag, created_at) VALUES (1, 'Monstera deliciosa', 'tropical', '2026-11-23 18:29:25.933851+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (3, 'Fern', '', '2026-11-23 18:29:25.991693+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (-7, 'Negative id', 'edge', '2026-11-23 18:29:26.05372+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (9223372036854775807, 'Largest id', 'edge', '2026-11-23 18:29:26.085548+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (-9223372036854775808, 'Smallest id', NULL, '2026-11-23 18:29:26.098848+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (2, 'Snake plant', 'shade', '2026-11-23 18:29:25.964923+00');
INSERT INTO public.plants (id, name, tag, created_at) VALUES (4, 'Ficus elastica', NULL, '2026-11-23 18:29:26.016853+00');


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.schema_migrations (version, name, applied_at) VALUES (1, '0001_init.sql', '2026-11-23 18:29:25.597386+00');


--
-- Data for Name: tokens; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (3, 'fixture-rotated', '\x56f0ee347feb79067db8a24a017c17e5f82b4c32d43caf1ab86350b8a5b4c6c9', 'plants:write', '2026-11-23 18:29:25.649514+00', NULL, '2026-11-23 18:29:25.671591+00');
INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (4, 'fixture-rotated', '\xfca0045a9356a16a3f79ca221cd1e5a7f95d3b01b851ce740e6c0604bea6ced4', 'plants:read plants:write', '2026-11-23 18:29:25.692441+00', NULL, NULL);
INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (1, 'fixture-admin', '\x41a3a3762ac353394545599f389b5d4bef8f0a5168dbe1dec3a46c7512c619e2', 'plants:read plants:write', '2026-11-23 18:29:25.599794+00', '2026-11-23 18:29:26.205536+00', NULL);
INSERT INTO public.tokens (id, name, hash, scopes, created_at, last_used_at, revoked_at) OVERRIDING SYSTEM VALUE VALUES (2, 'fixture-reader', '\x531ddd39403519d1709cbcdf2fd0f749bf232c58608acc6e6be026d43f1a855c', 'plants:read', '2026-11-23 18:29:25.62494+00', '2026-11-23 18:29:26.17807+00', NULL);


--
-- Name: tokens_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.tokens_id_seq', 4, true);


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
-- Name: plants_by_tag; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX plants_by_tag ON public.plants USING btree (tag, id);


--
-- Name: tokens_active_name; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX tokens_active_name ON public.tokens USING btree (name) WHERE (revoked_at IS NULL);


--
-- PostgreSQL database dump complete
--

\unrestrict 7Sc8cIYzRGL19Fb9fwgA4Utdouvk4RnD3zTt8B9M8KSsm5YITKFNFhJfQmXGMZP

