# syntax=docker/dockerfile:1
#
# The plantstore image: a static binary on distroless, as a non-root user.
#
#   docker build -t plantstore .
#   docker build -t plantstore:1.2.0 --build-arg VERSION=1.2.0 --build-arg COMMIT="$(git rev-parse HEAD)" .
#
# The build stage runs deploy/build.sh, the same script CI runs, so a CI
# run without a container engine still proves this build. The context
# includes .git (see .dockerignore): Go reads the commit from it, and marks
# a build from a changed tree +dirty. COMMIT is for contexts without .git,
# and fills the image's revision label.

FROM golang:1.26-bookworm AS build
# The Go of this image, never one downloaded for the build.
ENV GOTOOLCHAIN=local
WORKDIR /src
# Modules first, in a layer of their own: it is rebuilt only when go.mod or
# go.sum change, not on every edit of the source.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=""
ARG COMMIT=""
ARG DATE=""
RUN --mount=type=cache,target=/root/.cache/go-build \
    VERSION="$VERSION" COMMIT="$COMMIT" DATE="$DATE" bash deploy/build.sh /out/plantstore \
    && /out/plantstore version \
    && mkdir /out/data

# distroless/static: CA certificates (webhooks to https URLs), tzdata,
# /etc/passwd with nonroot (65532), and no shell or package manager.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=""
ARG COMMIT=""
LABEL org.opencontainers.image.title="plantstore" \
      org.opencontainers.image.description="The Plant Store API" \
      org.opencontainers.image.source="https://github.com/plantstore/plantstore" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$COMMIT"
COPY --from=build /out/plantstore /plantstore
# The SQLite store's directory, owned by nonroot, so a volume mounted on it
# starts writable. The default --db, ./plantstore.db, lands in it; it is
# not set by ENV, since PLANTSTORE_DB and PLANTSTORE_DB_FILE exclude each
# other and a deployment on PostgreSQL sets one of them.
COPY --from=build --chown=65532:65532 /out/data /data
WORKDIR /data
VOLUME ["/data"]
USER 65532:65532
ENV PLANTSTORE_ADDR=0.0.0.0:8080
EXPOSE 8080
# No shell or curl here: the binary probes itself, on the address it was
# told to listen on (PLANTSTORE_ADDR).
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["/plantstore", "health"]
ENTRYPOINT ["/plantstore"]
CMD ["serve"]
